#include "textflag.h"

// func Line(p unsafe.Pointer)
TEXT ·Line(SB), NOSPLIT|NOFRAME, $0-8
	MOVQ	p+0(FP), AX
	PREFETCHT0	(AX)
	RET

// func Lines(p unsafe.Pointer, n int)
// Eight lines a turn of the loop: a leaf or an inner node of the sparse
// set (25-32 lines) costs a third of the instructions of one a turn.
TEXT ·Lines(SB), NOSPLIT|NOFRAME, $0-16
	MOVQ	p+0(FP), AX
	MOVQ	n+8(FP), CX
	CMPQ	CX, $8
	JLT	tail
eight:
	PREFETCHT0	(AX)
	PREFETCHT0	64(AX)
	PREFETCHT0	128(AX)
	PREFETCHT0	192(AX)
	PREFETCHT0	256(AX)
	PREFETCHT0	320(AX)
	PREFETCHT0	384(AX)
	PREFETCHT0	448(AX)
	ADDQ	$512, AX
	SUBQ	$8, CX
	CMPQ	CX, $8
	JGE	eight
tail:
	TESTQ	CX, CX
	JLE	done
loop:
	PREFETCHT0	(AX)
	ADDQ	$64, AX
	DECQ	CX
	JNZ	loop
done:
	RET
