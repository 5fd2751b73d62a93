//! A classic BPF interpreter (McCanne & Jacobson, USENIX'93; the
//! instruction set of `pcap-filter(7)` programs), for the BPF module.
//! Programs are checked once when loaded (as the kernel's checker does:
//! known opcodes, jumps forward and inside the program, scratch memory
//! indices below 16, no division by a constant zero, the last
//! instruction a return), so running one cannot fail: a load past the
//! end of the packet, or a division by a zero X, returns 0 (no match).

/// One instruction, as `struct bpf_insn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// Longest program accepted (the kernel's `BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;
const MEMWORDS: u32 = 16;

// Classes, sizes, modes, operations, sources (bpf.h).
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const STX: u16 = 0x03;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const LEN: u16 = 0x80;
const MSH: u16 = 0xa0;
const ADD: u16 = 0x00;
const SUB: u16 = 0x10;
const MUL: u16 = 0x20;
const DIV: u16 = 0x30;
const OR: u16 = 0x40;
const AND: u16 = 0x50;
const LSH: u16 = 0x60;
const RSH: u16 = 0x70;
const NEG: u16 = 0x80;
const MOD: u16 = 0x90;
const XOR: u16 = 0xa0;
const JA: u16 = 0x00;
const JEQ: u16 = 0x10;
const JGT: u16 = 0x20;
const JGE: u16 = 0x30;
const JSET: u16 = 0x40;
const K: u16 = 0x00;
const X: u16 = 0x08;
const A: u16 = 0x10;
const TAX: u16 = 0x00;
const TXA: u16 = 0x80;

/// A checked program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    insns: Vec<Insn>,
}

impl Program {
    /// Check `insns`; the error names the first bad instruction.
    pub fn new(insns: Vec<Insn>) -> Result<Program, String> {
        if insns.is_empty() || insns.len() > MAX_INSNS {
            return Err(format!(
                "a program has 1 to {MAX_INSNS} instructions, not {}",
                insns.len()
            ));
        }
        let n = insns.len();
        for (pc, i) in insns.iter().enumerate() {
            let bad = |why: &str| Err(format!("instruction {pc} ({:#06x}): {why}", i.code));
            if i.code > 0xff {
                return bad("unknown opcode");
            }
            let ok = match i.code & 0x07 {
                LD => match i.code & 0xe0 {
                    ABS | IND => matches!(i.code & 0x18, W | H | B),
                    IMM | LEN => i.code & 0x18 == W,
                    MEM => i.code & 0x18 == W && i.k < MEMWORDS,
                    _ => false,
                },
                LDX => match i.code {
                    0x01 | 0x81 => true,    // IMM, LEN
                    0x61 => i.k < MEMWORDS, // MEM
                    c if c == LDX | B | MSH => true,
                    _ => false,
                },
                ST | STX => i.code & !0x07 == 0 && i.k < MEMWORDS,
                ALU => {
                    let op = i.code & 0xf0;
                    if i.code & !0xf8 != ALU {
                        false
                    } else if op == NEG {
                        i.code & X == 0
                    } else if matches!(op, DIV | MOD) && i.code & X == 0 && i.k == 0 {
                        return bad("division by a constant zero");
                    } else {
                        matches!(op, ADD | SUB | MUL | DIV | OR | AND | LSH | RSH | MOD | XOR)
                    }
                }
                JMP => {
                    let op = i.code & 0xf0;
                    if i.code & !0xf8 != JMP {
                        false
                    } else if op == JA {
                        if i.code & X != 0 || (pc as u64 + 1 + i.k as u64) >= n as u64 {
                            return bad("jump out of the program");
                        }
                        true
                    } else if matches!(op, JEQ | JGT | JGE | JSET) {
                        if pc + 1 + (i.jt.max(i.jf) as usize) >= n {
                            return bad("jump out of the program");
                        }
                        true
                    } else {
                        false
                    }
                }
                RET => matches!(i.code & !0x07, K | A),
                MISC => matches!(i.code & !0x07, TAX | TXA),
                _ => false,
            };
            if !ok {
                return bad("unknown or invalid opcode");
            }
        }
        if insns[n - 1].code & 0x07 != RET {
            return Err("the last instruction does not return".into());
        }
        Ok(Program { insns })
    }

    /// Parse libpcap's `code jt jf k` lines (the `Display` of
    /// `pcap::BpfInstruction`, and `tcpdump -ddd` after its count).
    pub fn from_text<'a>(lines: impl IntoIterator<Item = &'a str>) -> Result<Program, String> {
        let mut insns = Vec::new();
        for l in lines {
            let f: Vec<u64> = l
                .split_whitespace()
                .map(|x| {
                    x.parse::<u64>()
                        .map_err(|_| format!("bad instruction `{l}`"))
                })
                .collect::<Result<_, _>>()?;
            match f[..] {
                [code, jt, jf, k]
                    if code <= 0xffff && jt <= 255 && jf <= 255 && k <= u32::MAX as u64 =>
                {
                    insns.push(Insn {
                        code: code as u16,
                        jt: jt as u8,
                        jf: jf as u8,
                        k: k as u32,
                    })
                }
                _ => return Err(format!("bad instruction `{l}`")),
            }
        }
        Program::new(insns)
    }

    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// Run on packet `p`: the return value (0 = no match; otherwise the
    /// number of bytes to keep).
    pub fn run(&self, p: &[u8]) -> u32 {
        let (mut a, mut x) = (0u32, 0u32);
        let mut mem = [0u32; MEMWORDS as usize];
        let mut pc = 0usize;
        let load = |at: u64, size: u64| -> Option<u32> {
            let end = at.checked_add(size)?;
            if end > p.len() as u64 {
                return None;
            }
            let b = &p[at as usize..end as usize];
            Some(b.iter().fold(0u32, |v, &x| v << 8 | x as u32))
        };
        loop {
            // Checked at load: pc stays inside, forward only.
            let i = self.insns[pc];
            pc += 1;
            match i.code & 0x07 {
                LD => {
                    let size = match i.code & 0x18 {
                        W => 4,
                        H => 2,
                        _ => 1,
                    };
                    a = match i.code & 0xe0 {
                        ABS => match load(i.k as u64, size) {
                            Some(v) => v,
                            None => return 0,
                        },
                        IND => match load(x as u64 + i.k as u64, size) {
                            Some(v) => v,
                            None => return 0,
                        },
                        IMM => i.k,
                        LEN => p.len() as u32,
                        _ => mem[i.k as usize],
                    };
                }
                LDX => {
                    x = match i.code {
                        0x01 => i.k,
                        0x81 => p.len() as u32,
                        0x61 => mem[i.k as usize],
                        _ => match load(i.k as u64, 1) {
                            Some(v) => (v & 0x0f) * 4,
                            None => return 0,
                        },
                    };
                }
                ST => mem[i.k as usize] = a,
                STX => mem[i.k as usize] = x,
                ALU => {
                    let v = if i.code & X != 0 { x } else { i.k };
                    a = match i.code & 0xf0 {
                        ADD => a.wrapping_add(v),
                        SUB => a.wrapping_sub(v),
                        MUL => a.wrapping_mul(v),
                        DIV => match a.checked_div(v) {
                            Some(q) => q,
                            None => return 0,
                        },
                        MOD => match a.checked_rem(v) {
                            Some(q) => q,
                            None => return 0,
                        },
                        OR => a | v,
                        AND => a & v,
                        LSH => a.checked_shl(v).unwrap_or(0),
                        RSH => a.checked_shr(v).unwrap_or(0),
                        NEG => a.wrapping_neg(),
                        _ => a ^ v,
                    };
                }
                JMP => {
                    let v = if i.code & X != 0 { x } else { i.k };
                    let taken = match i.code & 0xf0 {
                        JA => {
                            pc += i.k as usize;
                            continue;
                        }
                        JEQ => a == v,
                        JGT => a > v,
                        JGE => a >= v,
                        _ => a & v != 0,
                    };
                    pc += if taken { i.jt } else { i.jf } as usize;
                }
                RET => return if i.code & A != 0 { a } else { i.k },
                _ => {
                    if i.code & TXA != 0 {
                        a = x;
                    } else {
                        x = a;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(v: &[(u16, u8, u8, u32)]) -> Result<Program, String> {
        Program::new(
            v.iter()
                .map(|&(code, jt, jf, k)| Insn { code, jt, jf, k })
                .collect(),
        )
    }

    #[test]
    fn checker_refuses_what_could_go_wrong() {
        assert!(prog(&[]).is_err());
        assert!(prog(&[(0x15, 1, 0, 0), (0x06, 0, 0, 1)])
            .unwrap_err()
            .contains("jump out"));
        assert!(prog(&[(0x05, 0, 0, 0)]).unwrap_err().contains("jump out"));
        assert!(prog(&[(0x34, 0, 0, 0), (0x06, 0, 0, 1)])
            .unwrap_err()
            .contains("zero"));
        assert!(prog(&[(0x60, 0, 0, 16), (0x06, 0, 0, 1)])
            .unwrap_err()
            .contains("invalid"));
        assert!(prog(&[(0x28, 0, 0, 12)])
            .unwrap_err()
            .contains("does not return"));
        assert!(prog(&[(0xff, 0, 0, 0), (0x06, 0, 0, 1)]).is_err());
    }

    #[test]
    fn runs_arithmetic_memory_and_out_of_bounds_loads() {
        // A = P[0:2]; X = 4*(P[2]&15); A += X; M[3] = A; A = 0; A = M[3]; ret A
        let p = prog(&[
            (0x28, 0, 0, 0),
            (0xb1, 0, 0, 2),
            (0x0c, 0, 0, 0),
            (0x02, 0, 0, 3),
            (0x00, 0, 0, 0),
            (0x60, 0, 0, 3),
            (0x16, 0, 0, 0),
        ])
        .unwrap();
        assert_eq!(p.run(&[0x01, 0x02, 0x45]), 0x0102 + 20);
        assert_eq!(p.run(&[0x01]), 0, "a load past the end is no match");
        // X = 0; A = 1; A /= X -> 0.
        let d = prog(&[
            (0x01, 0, 0, 0),
            (0x00, 0, 0, 1),
            (0x3c, 0, 0, 0),
            (0x06, 0, 0, 9),
        ])
        .unwrap();
        assert_eq!(d.run(&[]), 0);
        // Jumps: A = P[0]; if A > 5 ret 1 else ret 2.
        let j = prog(&[
            (0x30, 0, 0, 0),
            (0x25, 0, 1, 5),
            (0x06, 0, 0, 1),
            (0x06, 0, 0, 2),
        ])
        .unwrap();
        assert_eq!((j.run(&[6]), j.run(&[5])), (1, 2));
    }
}
