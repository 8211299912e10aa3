// Command plot reads raw `go test -bench` output of the bench module and
// draws alloc+release time against fill level, one panel per prefix, one
// line per implementation, on a log scale: an SVG written by hand. It also
// prints a Markdown summary: the speedups over the Kubernetes allocators
// and the targets of BENCHMARKS.md, met or missed.
//
//	go run ./cmd/plot -o results/fill.svg results/*.txt > results/summary.md
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// result is one benchmark: its name keys and the samples of each unit.
type result struct {
	name    string            // without the Benchmark prefix's -procs suffix
	keys    map[string]string // impl=..., prefix=..., ...
	samples map[string][]float64
}

type results struct {
	byName map[string]*result
	order  []string
}

// parse reads benchmark lines: "BenchmarkX/k=v/k=v-2  N  v unit  v unit...".
func (rs *results) parse(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		res := rs.byName[name]
		if res == nil {
			res = &result{name: name, keys: map[string]string{}, samples: map[string][]float64{}}
			parts := strings.Split(name, "/")
			res.keys["bench"] = parts[0]
			for _, p := range parts[1:] {
				if k, v, ok := strings.Cut(p, "="); ok {
					res.keys[k] = v
				}
			}
			rs.byName[name] = res
			rs.order = append(rs.order, name)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			res.samples[f[i+1]] = append(res.samples[f[i+1]], v)
		}
	}
	return sc.Err()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// get returns the median of unit for the benchmark bench with exactly these keys.
func (rs *results) get(bench, unit string, kv ...string) (float64, bool) {
	name := bench
	for i := 0; i+1 < len(kv); i += 2 {
		name += "/" + kv[i] + "=" + kv[i+1]
	}
	r := rs.byName[name]
	if r == nil || len(r.samples[unit]) == 0 {
		return 0, false
	}
	return median(r.samples[unit]), true
}

var (
	impls    = []string{"netipam", "netipam-seq", "k8s-bitmap", "k8s-ipaddress"}
	colors   = map[string]string{"netipam": "#1f5fbf", "netipam-seq": "#2ca02c", "k8s-bitmap": "#d62728", "k8s-ipaddress": "#ff7f0e"}
	fills    = []string{"0", "50", "90", "99", "99.9", "99.99"}
	prefixes = []struct{ bits, title string }{{"20", "IPv4 /20"}, {"16", "IPv4 /16"}, {"12", "IPv4 /12"}, {"112", "IPv6 /112"}}
)

const bench = "BenchmarkAllocRelease"

// svg draws the fill plot.
func svg(w io.Writer, rs *results) error {
	const (
		W, H           = 1080, 830
		panelW, panelH = 430, 280
		left, top      = 85, 100
		gapX, gapY     = 110, 95
	)
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, p := range prefixes {
		for _, impl := range impls {
			for _, f := range fills {
				if v, ok := rs.get(bench, "ns/op", "impl", impl, "prefix", p.bits, "fill", f); ok && v > 0 {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
	}
	if math.IsInf(lo, 1) {
		return fmt.Errorf("no %s results", bench)
	}
	lo = math.Min(lo, 200) // keep the 200 ns target line in view
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi == dLo {
		dHi++
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="13">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="28" font-size="18" text-anchor="middle">AllocateNext + Release: time per operation against fill level (log scale, lower is better)</text>`+"\n", W/2)
	// legend
	lx := 110
	for _, impl := range impls {
		fmt.Fprintf(&b, `<line x1="%d" y1="52" x2="%d" y2="52" stroke="%s" stroke-width="3"/><circle cx="%d" cy="52" r="4" fill="%s"/>`, lx, lx+30, colors[impl], lx+15, colors[impl])
		fmt.Fprintf(&b, `<text x="%d" y="57">%s</text>`+"\n", lx+38, impl)
		lx += 190
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="70" x2="%d" y2="70" stroke="#555" stroke-dasharray="6,4"/><text x="%d" y="74" fill="#555">200 ns target</text>`+"\n", 110, 140, 148)
	for i, p := range prefixes {
		x0 := left + (i%2)*(panelW+gapX)
		y0 := top + (i/2)*(panelH+gapY)
		yOf := func(v float64) float64 {
			return float64(y0+panelH) - (math.Log10(v)-dLo)/(dHi-dLo)*panelH
		}
		xOf := func(j int) float64 {
			return float64(x0) + 20 + float64(j)*float64(panelW-40)/float64(len(fills)-1)
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, panelW, panelH)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="15" text-anchor="middle" font-weight="bold">%s</text>`+"\n", x0+panelW/2, y0-8, p.title)
		for d := dLo; d <= dHi; d++ {
			y := yOf(math.Pow(10, d))
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, x0, y, x0+panelW, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, y+4, fmtNs(math.Pow(10, d)))
		}
		y200 := yOf(200)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#555" stroke-dasharray="6,4"/>`+"\n", x0, y200, x0+panelW, y200)
		for j, f := range fills {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s%%</text>`+"\n", xOf(j), y0+panelH+18, f)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#555">fill level</text>`+"\n", x0+panelW/2, y0+panelH+36)
		for _, impl := range impls {
			var pts []string
			for j, f := range fills {
				v, ok := rs.get(bench, "ns/op", "impl", impl, "prefix", p.bits, "fill", f)
				if !ok {
					continue
				}
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xOf(j), yOf(v)))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"><title>%s %s%%: %s</title></circle>`+"\n", xOf(j), yOf(v), colors[impl], impl, f, fmtNs(v))
			}
			if len(pts) > 1 {
				fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", strings.Join(pts, " "), colors[impl])
			}
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" fill="#555">k8s-ipaddress runs only where it can hold the fill (see BENCHMARKS.md)</text>`+"\n", W/2, H-10)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func fmtNs(v float64) string {
	switch {
	case v >= 1e9:
		return trim(v/1e9) + " s"
	case v >= 1e6:
		return trim(v/1e6) + " ms"
	case v >= 1e3:
		return trim(v/1e3) + " µs"
	}
	return trim(v) + " ns"
}

func trim(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	if v >= 10 {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func fmtRatio(r float64) string {
	switch {
	case math.IsNaN(r):
		return "–"
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64) + "×"
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64) + "×"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "×"
}

// floorTable prints netipam beside Floor (BenchmarkAllocReleaseFloor), if
// the results hold it: a mutex and a bitmap, with owners in a Go map
// (floor, the least for records in a hash table) and, where measured, in
// an array indexed by address (floor-dense), and that array with an owner
// index (floor-indexed, the least that answers AddressesOf), the last
// beside netipam with its store's owner index kept (netipam-indexed).
func floorTable(w io.Writer, rs *results) {
	const floorBench = "BenchmarkAllocReleaseFloor"
	var rows []string
	for _, p := range prefixes {
		for _, f := range fills {
			fv, ok := rs.get(floorBench, "ns/op", "impl", "floor", "prefix", p.bits, "fill", f)
			if !ok {
				continue
			}
			dense, indexed, nsIndexed, ratioIndexed := "–", "–", "–", "–"
			if dv, ok := rs.get(floorBench, "ns/op", "impl", "floor-dense", "prefix", p.bits, "fill", f); ok {
				dense = fmtNs(dv)
			}
			iv, iok := rs.get(floorBench, "ns/op", "impl", "floor-indexed", "prefix", p.bits, "fill", f)
			if iok {
				indexed = fmtNs(iv)
			}
			if nv, ok := rs.get(floorBench, "ns/op", "impl", "netipam-indexed", "prefix", p.bits, "fill", f); ok {
				nsIndexed = fmtNs(nv)
				if iok {
					ratioIndexed = fmtRatio(nv / iv)
				}
			}
			n, nok := rs.get(bench, "ns/op", "impl", "netipam", "prefix", p.bits, "fill", f)
			ns, ratio := "–", "–"
			if nok {
				ns, ratio = fmtNs(n), fmtRatio(n/fv)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |", p.title, f, fmtNs(fv), dense, indexed, ns, ratio, nsIndexed, ratioIndexed))
		}
	}
	printTable(w, "The floor: a mutex, a bitmap and owners in a Go map or an array (with an owner index or without), medians",
		"prefix | fill % | floor | floor-dense | floor-indexed | netipam | netipam / floor | netipam-indexed | netipam-indexed / floor-indexed", rows)
}

// printTable prints a Markdown table under a heading: title, the columns
// of header (separated by " | "), then rows, each a whole "| … |" line.
// With no rows it prints nothing: the results did not hold the table.
func printTable(w io.Writer, title, header string, rows []string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "### %s\n\n| %s |\n|%s\n", title, header, strings.Repeat("---|", strings.Count(header, " | ")+1))
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	fmt.Fprintln(w)
}

// instrUnit is the unit of the instruction counts run.sh's ir group
// writes (bench/ir.sh's, as benchmark lines).
const instrUnit = "instr/op"

// instrTable prints, if the results hold instruction counts, netipam's
// and the bitmap's instructions a cycle, their ratio, and how many of
// each the host ran a nanosecond (the count over the run's median time).
// The ratio does not move with the host; the speed-up in time is that
// ratio times the ratio of the two rates, which depends on the processor.
func instrTable(w io.Writer, rs *results) {
	var rows []string
	for _, p := range prefixes {
		for _, f := range fills {
			// A side's count and rate, or dashes where it has no count.
			side := func(impl string) (n float64, count, rate string) {
				n, ok := rs.get(bench, instrUnit, "impl", impl, "prefix", p.bits, "fill", f)
				if !ok {
					return 0, "–", "–"
				}
				count, rate = strconv.FormatFloat(n, 'f', 0, 64), "–"
				if t, ok := rs.get(bench, "ns/op", "impl", impl, "prefix", p.bits, "fill", f); ok && t > 0 {
					rate = strconv.FormatFloat(n/t, 'f', 1, 64)
				}
				return n, count, rate
			}
			ni, nc, nr := side("netipam")
			bi, bc, br := side("k8s-bitmap")
			if nc == "–" && bc == "–" {
				continue
			}
			ratio := "–"
			if ni > 0 && bi > 0 {
				ratio = fmtRatio(bi / ni)
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", p.title, f, nc, bc, ratio, nr, br))
		}
	}
	printTable(w, "Instructions an alloc+release (bench/ir.sh), and how many a nanosecond this host ran",
		"prefix | fill % | netipam | k8s-bitmap | bitmap / netipam | netipam a ns | bitmap a ns", rows)
}

// summary prints the speedup table and the targets.
func summary(w io.Writer, rs *results) {
	fmt.Fprintln(w, "### AllocateNext + Release, medians, and netipam's speedup")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| prefix | fill % | netipam | netipam-seq | k8s-bitmap | k8s-ipaddress | bitmap / netipam | ipaddress / netipam |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	cell := func(impl, p, f string) (string, float64) {
		v, ok := rs.get(bench, "ns/op", "impl", impl, "prefix", p, "fill", f)
		if !ok {
			return "–", math.NaN()
		}
		return fmtNs(v), v
	}
	for _, p := range prefixes {
		for _, f := range fills {
			n, nv := cell("netipam", p.bits, f)
			s, _ := cell("netipam-seq", p.bits, f)
			bm, bv := cell("k8s-bitmap", p.bits, f)
			ia, iv := cell("k8s-ipaddress", p.bits, f)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", p.title, f, n, s, bm, ia, fmtRatio(bv/nv), fmtRatio(iv/nv))
		}
	}
	fmt.Fprintln(w)
	floorTable(w, rs)
	instrTable(w, rs)
	fmt.Fprintln(w, "### IPv6 /64 and /48 with addresses already allocated, medians")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| prefix | used | layout | netipam | netipam-seq | k8s-bitmap | k8s-ipaddress |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, name := range rs.order {
		r := rs.byName[name]
		if r.keys["bench"] != "BenchmarkAllocReleaseLarge" || r.keys["impl"] != "netipam" {
			continue
		}
		fmt.Fprintf(w, "| /%s | %s | %s |", r.keys["prefix"], r.keys["used"], r.keys["layout"])
		for _, impl := range impls {
			v, ok := rs.get("BenchmarkAllocReleaseLarge", "ns/op", "impl", impl, "prefix", r.keys["prefix"], "used", r.keys["used"], "layout", r.keys["layout"])
			if ok {
				fmt.Fprintf(w, " %s |", fmtNs(v))
			} else {
				fmt.Fprint(w, " – |")
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	targets(w, rs)
}

type target struct {
	what, goal, measured string
	met                  bool
	known                bool
}

// targets evaluates the targets of BENCHMARKS.md from the results.
func targets(w io.Writer, rs *results) {
	var ts []target
	add := func(what, goal, measured string, met, known bool) {
		ts = append(ts, target{what, goal, measured, met, known})
	}
	// alloc+release <= 200 ns and flat, /16 and /12
	for _, p := range []string{"16", "12"} {
		var vs []float64
		for _, f := range fills {
			if v, ok := rs.get(bench, "ns/op", "impl", "netipam", "prefix", p, "fill", f); ok {
				vs = append(vs, v)
			}
		}
		if len(vs) == 0 {
			add("alloc+release /"+p+", 0–99.99 %", "≤ 200 ns", "not run", false, false)
			add("flatness /"+p, "max/min ≤ 2×", "not run", false, false)
			continue
		}
		mx, mn := slices.Max(vs), slices.Min(vs)
		add("alloc+release /"+p+", 0–99.99 %", "≤ 200 ns", fmt.Sprintf("%s – %s", fmtNs(mn), fmtNs(mx)), mx <= 200, true)
		add("flatness /"+p, "max/min ≤ 2×", fmtRatio(mx/mn), mx/mn <= 2, true)
	}
	for _, p := range []string{"64", "48"} {
		var vs []float64
		for _, name := range rs.order {
			r := rs.byName[name]
			if r.keys["bench"] == "BenchmarkAllocReleaseLarge" && r.keys["impl"] == "netipam" && r.keys["prefix"] == p {
				vs = append(vs, median(r.samples["ns/op"]))
			}
		}
		if len(vs) == 0 {
			continue
		}
		mx, mn := slices.Max(vs), slices.Min(vs)
		add("alloc+release /"+p+", 0/1M/10M used, packed and random", "≤ 200 ns", fmt.Sprintf("%s – %s", fmtNs(mn), fmtNs(mx)), mx <= 200, true)
		add("flatness /"+p, "max/min ≤ 2×", fmtRatio(mx/mn), mx/mn <= 2, true)
	}
	// speedups over the bitmap
	for _, c := range []struct {
		fills []string
		goal  float64
	}{{[]string{"0", "50", "90"}, 5}, {[]string{"99.9"}, 1000}} {
		worst := math.Inf(1)
		var where string
		for _, p := range prefixes {
			for _, f := range c.fills {
				n, ok1 := rs.get(bench, "ns/op", "impl", "netipam", "prefix", p.bits, "fill", f)
				bm, ok2 := rs.get(bench, "ns/op", "impl", "k8s-bitmap", "prefix", p.bits, "fill", f)
				if ok1 && ok2 && bm/n < worst {
					worst, where = bm/n, fmt.Sprintf("%s at %s %%", p.title, f)
				}
			}
		}
		if !math.IsInf(worst, 1) {
			add(fmt.Sprintf("vs k8s bitmap, fill %s %%", strings.Join(c.fills, "/")), fmt.Sprintf("≥ %g× faster", c.goal),
				fmt.Sprintf("worst %s (%s)", fmtRatio(worst), where), worst >= c.goal, true)
		}
	}
	worst, where := math.Inf(1), ""
	for _, name := range rs.order {
		r := rs.byName[name]
		if r.keys["impl"] != "k8s-ipaddress" || r.keys["bench"] == "BenchmarkHeapPerAddr" || r.keys["bench"] == "BenchmarkFillRange" {
			continue
		}
		kv := []string{}
		parts := strings.Split(name, "/")
		for _, p := range parts[1:] {
			k, v, _ := strings.Cut(p, "=")
			if k == "impl" {
				v = "netipam"
			}
			kv = append(kv, k, v)
		}
		n, ok := rs.get(parts[0], "ns/op", kv...)
		if !ok || r.keys["bench"] == "BenchmarkAllocateNextFull" {
			continue // a full range is a different question
		}
		if ratio := median(r.samples["ns/op"]) / n; ratio < worst {
			worst, where = ratio, strings.TrimPrefix(name, "Benchmark")
		}
	}
	if !math.IsInf(worst, 1) {
		add("vs k8s IPAddress allocator", "≥ 1000× faster", fmt.Sprintf("worst %s (%s)", fmtRatio(worst), where), worst >= 1000, true)
	}
	for _, p := range []string{"20", "16"} {
		if v, ok := rs.get("BenchmarkAllocateNextFull", "ns/op", "impl", "netipam", "prefix", p); ok {
			add("AllocateNext on a full /"+p, "≤ 100 ns", fmtNs(v), v <= 100, true)
		}
	}
	for _, name := range rs.order {
		r := rs.byName[name]
		if r.keys["bench"] != "BenchmarkHeapPerAddr" {
			continue
		}
		var kept string
		switch r.keys["impl"] {
		case "netipam":
		case "netipam-indexed":
			kept = ", owner index kept"
		default:
			continue
		}
		v := median(r.samples["B/addr"])
		add(fmt.Sprintf("heap per address, /%s, %s addresses%s", r.keys["prefix"], r.keys["n"], kept), "≤ 100 B", fmt.Sprintf("%.0f B", v), v <= 100, true)
	}
	var fin []float64
	var finKeys []string
	for _, name := range rs.order {
		r := rs.byName[name]
		if r.keys["bench"] == "BenchmarkFinalizerDecision" {
			fin = append(fin, median(r.samples["ns/op"]))
			finKeys = append(finKeys, r.keys["outside"])
		}
	}
	if len(fin) == 2 {
		add(fmt.Sprintf("finalizer decision, %s vs %s outside", finKeys[1], finKeys[0]), "≤ 2×",
			fmt.Sprintf("%s vs %s = %s", fmtNs(fin[1]), fmtNs(fin[0]), fmtRatio(fin[1]/fin[0])), fin[1]/fin[0] <= 2, true)
	}
	for _, name := range rs.order {
		r := rs.byName[name]
		if r.keys["bench"] == "BenchmarkColdStart" && r.keys["impl"] == "netipam" {
			v := median(r.samples["ns/op"])
			add(fmt.Sprintf("cold start, /%s, %s addresses", r.keys["prefix"], r.keys["used"]), "≤ 1 s", fmtNs(v), v <= 1e9, true)
		}
	}
	fmt.Fprintln(w, "### Targets")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | goal | measured | |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, t := range ts {
		verdict := "missed"
		switch {
		case !t.known:
			verdict = "not run"
		case t.met:
			verdict = "met"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", t.what, t.goal, t.measured, verdict)
	}
}

func main() {
	out := flag.String("o", "results/fill.svg", "SVG file to write")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: plot [-o fill.svg] results.txt... > summary.md")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	rs := &results{byName: map[string]*result{}}
	for _, path := range flag.Args() {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		err = rs.parse(f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, path+":", err)
			os.Exit(1)
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := svg(f, rs); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := f.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	summary(os.Stdout, rs)
}
