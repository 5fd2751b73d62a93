//! Tokens of the config language, each with its position.

use super::ConfigError;
use crate::args::Pos;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Name(String),
    Int(u64),
    Float(f64),
    Str(String),
    Arrow,
    DoubleColon,
    Colon,
    Comma,
    Dot,
    Equals,
    LParen,
    RParen,
    LBracket,
    RBracket,
    /// End of a statement: a newline outside brackets, or `;`.
    End,
    Eof,
}

impl Tok {
    /// How the token reads in "expected X, found Y" messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Name(n) => format!("`{n}`"),
            Tok::Int(v) => format!("number {v}"),
            Tok::Float(v) => format!("number {v}"),
            Tok::Str(s) => format!("string {s:?}"),
            Tok::Arrow => "`->`".into(),
            Tok::DoubleColon => "`::`".into(),
            Tok::Colon => "`:`".into(),
            Tok::Comma => "`,`".into(),
            Tok::Dot => "`.`".into(),
            Tok::Equals => "`=`".into(),
            Tok::LParen => "`(`".into(),
            Tok::RParen => "`)`".into(),
            Tok::LBracket => "`[`".into(),
            Tok::RBracket => "`]`".into(),
            Tok::End => "end of line".into(),
            Tok::Eof => "end of file".into(),
        }
    }
}

/// Split `src` into tokens. Comments run from `#` to the end of the line.
pub fn lex(src: &str, file: &str) -> Result<Vec<(Tok, Pos)>, ConfigError> {
    let chars: Vec<char> = src.chars().collect();
    let mut out: Vec<(Tok, Pos)> = Vec::new();
    let (mut i, mut line, mut col) = (0usize, 1usize, 1usize);
    // Positions of the brackets still open.
    let mut open: Vec<(char, Pos)> = Vec::new();
    let err = |pos: Pos, msg: String| ConfigError::new(file, pos, msg);
    while i < chars.len() {
        let c = chars[i];
        let pos = Pos { line, col };
        let advance = |n: usize, i: &mut usize, col: &mut usize| {
            *i += n;
            *col += n;
        };
        match c {
            '\n' => {
                if open.is_empty() {
                    out.push((Tok::End, pos));
                }
                i += 1;
                line += 1;
                col = 1;
            }
            ' ' | '\t' | '\r' => advance(1, &mut i, &mut col),
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            ';' => {
                out.push((Tok::End, pos));
                advance(1, &mut i, &mut col);
            }
            '-' if chars.get(i + 1) == Some(&'>') => {
                out.push((Tok::Arrow, pos));
                advance(2, &mut i, &mut col);
            }
            ':' if chars.get(i + 1) == Some(&':') => {
                out.push((Tok::DoubleColon, pos));
                advance(2, &mut i, &mut col);
            }
            ':' | ',' | '.' | '=' | '(' | ')' | '[' | ']' => {
                let t = match c {
                    ':' => Tok::Colon,
                    ',' => Tok::Comma,
                    '.' => Tok::Dot,
                    '=' => Tok::Equals,
                    '(' | '[' => {
                        open.push((c, pos));
                        if c == '(' {
                            Tok::LParen
                        } else {
                            Tok::LBracket
                        }
                    }
                    _ => {
                        let want = if c == ')' { '(' } else { '[' };
                        match open.pop() {
                            Some((o, _)) if o == want => {}
                            Some((o, at)) => {
                                return Err(err(
                                    pos,
                                    format!(
                                        "`{c}` does not match the `{o}` at {}:{}",
                                        at.line, at.col
                                    ),
                                ))
                            }
                            None => return Err(err(pos, format!("unbalanced `{c}`"))),
                        }
                        if c == ')' {
                            Tok::RParen
                        } else {
                            Tok::RBracket
                        }
                    }
                };
                out.push((t, pos));
                advance(1, &mut i, &mut col);
            }
            '"' => {
                let mut s = String::new();
                let mut j = i + 1;
                loop {
                    match chars.get(j) {
                        None | Some('\n') => {
                            return Err(err(pos, "string is not closed with `\"`".into()))
                        }
                        Some('"') => break,
                        Some('\\') => {
                            match chars.get(j + 1) {
                                Some('n') => s.push('\n'),
                                Some('t') => s.push('\t'),
                                Some(&e @ ('\\' | '"')) => s.push(e),
                                _ => {
                                    return Err(err(
                                        Pos {
                                            line,
                                            col: col + (j - i),
                                        },
                                        "unknown escape (use \\\\, \\\", \\n or \\t)".into(),
                                    ))
                                }
                            }
                            j += 2;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            j += 1;
                        }
                    }
                }
                out.push((Tok::Str(s), pos));
                advance(j + 1 - i, &mut i, &mut col);
            }
            c if c.is_ascii_digit() => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == '.')
                {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                col += i - start;
                out.push((
                    number(&text).ok_or_else(|| {
                        err(
                            pos,
                            format!(
                                "`{text}` is not a number (examples: 64, 0x1f, 10M, 1.5G, 0.25)"
                            ),
                        )
                    })?,
                    pos,
                ));
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                col += i - start;
                out.push((Tok::Name(chars[start..i].iter().collect()), pos));
            }
            c => return Err(err(pos, format!("unexpected character `{c}`"))),
        }
    }
    if let Some((o, at)) = open.pop() {
        return Err(err(at, format!("`{o}` is never closed")));
    }
    out.push((Tok::End, Pos { line, col }));
    out.push((Tok::Eof, Pos { line, col }));
    Ok(out)
}

/// `64`, `0x1f`, `1_000`, `10M`, `1.5G`, `0.25`, `100k`.
fn number(text: &str) -> Option<Tok> {
    let t = text.replace('_', "");
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(hex, 16).ok().map(Tok::Int);
    }
    let (digits, mult) = match t.chars().last()? {
        'k' | 'K' => (&t[..t.len() - 1], 1e3),
        'M' => (&t[..t.len() - 1], 1e6),
        'G' => (&t[..t.len() - 1], 1e9),
        'T' => (&t[..t.len() - 1], 1e12),
        _ => (&t[..], 1.0),
    };
    if let Ok(v) = digits.parse::<u64>() {
        return v.checked_mul(mult as u64).map(Tok::Int);
    }
    let f: f64 = digits.parse().ok()?;
    if !f.is_finite() || f < 0.0 {
        return None;
    }
    if mult > 1.0 {
        let v = f * mult;
        (v <= u64::MAX as f64 && v.fract() == 0.0).then_some(Tok::Int(v as u64))
    } else {
        Some(Tok::Float(f))
    }
}
