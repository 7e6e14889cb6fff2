//! Lexer and parser for Go's text/template: text, `{{ }}` actions with `-` trim markers,
//! comments, pipelines, variables, `if` / `with` / `range`, and `define` / `template` / `block`.
//! Nesting (control structures and parentheses together) is bounded by [`MAX_DEPTH`] so no
//! template can overflow the stack.

use std::cell::Cell;
use std::collections::BTreeMap;

use super::Error;
use super::funcs::names as funcs;

/// A parsed template body.
pub(super) type List = Vec<Node>;

/// The deepest nesting of control structures and parenthesised pipelines a template may have.
/// Go has no such limit below 10,000; real values templates nest a handful of levels.
pub const MAX_DEPTH: usize = 100;

/// A parsed file: its body and the templates it defines (`define` / `block`).
#[derive(Debug, Clone)]
pub(super) struct Tree {
    pub root: List,
    pub defines: BTreeMap<String, List>,
}

#[derive(Debug, Clone)]
pub(super) enum Node {
    Text(String),
    /// `{{ pipeline }}`: the value is printed unless the pipeline declares variables.
    Action(Pipe),
    If {
        branches: Vec<(Pipe, List)>,
        otherwise: Option<List>,
    },
    With {
        branches: Vec<(Pipe, List)>,
        otherwise: Option<List>,
    },
    Range {
        pipe: Pipe,
        body: List,
        otherwise: Option<List>,
    },
    Break,
    Continue,
    /// `{{template "name" pipeline}}` (also what a `block` leaves in place).
    Template {
        line: usize,
        name: String,
        pipe: Option<Pipe>,
    },
}

#[derive(Debug, Clone)]
pub(super) struct Pipe {
    pub line: usize,
    /// Variables declared (`:=`) or assigned (`=`) by this pipeline.
    pub decl: Vec<String>,
    pub assign: bool,
    pub cmds: Vec<Cmd>,
}

#[derive(Debug, Clone)]
pub(super) struct Cmd {
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone)]
pub(super) enum Arg {
    /// `.a.b`; `.` alone is an empty chain.
    Field(Vec<String>),
    /// `$x.a.b`; `$` is the root.
    Var(String, Vec<String>),
    /// A function name.
    Func(String),
    Str(String),
    Num(Num),
    Bool(bool),
    Nil,
    /// `(pipeline).a.b`
    Sub(Box<Pipe>, Vec<String>),
}

/// A number constant as Go's parser keeps it (`parse.NumberNode`): the ways it can be read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Num {
    pub int: Option<i64>,
    pub float: Option<f64>,
    /// Written as a float (`1.0`, `1e3`, `0x1p4`): an `interface{}` argument gets a `float64`.
    pub float_syntax: bool,
    /// A character constant (`'a'`), an `int` rune.
    pub rune: bool,
    /// An imaginary or complex constant (`1i`, `1+2i`): an `interface{}` argument gets a
    /// `complex128` (real, imaginary).
    pub complex: Option<(f64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(Vec<String>),
    Var(String, Vec<String>),
    /// Fields chained directly onto a closing parenthesis: `(...).a.b`.
    Chain(Vec<String>),
    Ident(String),
    Str(String),
    Num(String),
    Complex(String),
    Char(char),
    /// Two operands written without a space between them (`len(x)`, `"a""b"`): Go's parser
    /// refuses them.
    Glued,
    LParen,
    RParen,
    Pipe,
    Declare,
    Assign,
    Comma,
}

/// One `{{ }}` action after lexing.
struct Action {
    line: usize,
    toks: Vec<Tok>,
}

enum Item {
    Text(String),
    Action(Action),
}

struct Cx<'a> {
    file: &'a str,
}

impl Cx<'_> {
    fn err(&self, line: usize, message: impl Into<String>) -> Error {
        Error { file: self.file.to_owned(), line, message: message.into() }
    }
}

pub(super) fn parse(file: &str, text: &str) -> Result<Tree, Error> {
    let cx = Cx { file };
    let items = split(&cx, text)?;
    let mut parser = Parser {
        cx: &cx,
        items: items.into_iter().peekable(),
        range_depth: 0,
        vars: vec!["$".to_owned()],
        depth: Cell::new(0),
        defines: BTreeMap::new(),
    };
    let (list, end) = parser.list()?;
    match end {
        None => Ok(Tree { root: list, defines: parser.defines }),
        Some((line, word)) => Err(cx.err(line, format!("unexpected `{{{{{word}}}}}` without a matching `if`, `with` or `range`"))),
    }
}

/// Splits text and actions, applying trim markers and dropping comments.
fn split(cx: &Cx<'_>, text: &str) -> Result<Vec<Item>, Error> {
    let mut items = Vec::new();
    let mut rest = text;
    let mut line = 1;
    let mut trim_next = false;
    while !rest.is_empty() {
        let (before, after) = match rest.find("{{") {
            Some(i) => (&rest[..i], Some(&rest[i + 2..])),
            None => (rest, None),
        };
        let mut chunk = before;
        if trim_next {
            chunk = chunk.trim_start_matches(GO_SPACE);
        }
        let Some(after) = after else {
            if !chunk.is_empty() {
                items.push(Item::Text(chunk.to_owned()));
            }
            break;
        };
        line += before.matches('\n').count();
        let (trim_left, body_start) = match after.strip_prefix('-') {
            Some(b) if b.starts_with(GO_SPACE) => (true, b),
            _ => (false, after),
        };
        if trim_left {
            chunk = chunk.trim_end_matches(GO_SPACE);
        }
        if !chunk.is_empty() {
            items.push(Item::Text(chunk.to_owned()));
        }
        let (toks, body_len, trim_right) = lex_action(cx, body_start, trim_left, line)?;
        let consumed = &body_start[..body_len];
        let action_line = line;
        line += consumed.matches('\n').count();
        if let Some(toks) = toks {
            items.push(Item::Action(Action { line: action_line, toks }));
        }
        trim_next = trim_right;
        rest = &body_start[body_len..];
    }
    Ok(items)
}

/// What Go's template lexer counts as space: around trim markers and between words.
const GO_SPACE: [char; 4] = [' ', '\t', '\r', '\n'];

/// Lexes one action body (after `{{` and an optional `- `). Returns its tokens (`None` for a
/// comment), the bytes consumed including the closing `}}`, and whether `-}}` trims what follows.
fn lex_action(cx: &Cx<'_>, s: &str, trimmed_left: bool, line: usize) -> Result<(Option<Vec<Tok>>, usize, bool), Error> {
    // Go: a comment starts right after `{{`, or after `{{- ` and exactly one space.
    let at_comment = if trimmed_left { s.get(1..).unwrap_or_default() } else { s };
    if let Some(comment) = at_comment.strip_prefix("/*") {
        let Some(end) = comment.find("*/") else { return Err(cx.err(line, "unclosed comment")) };
        let after = &comment[end + 2..];
        let (trim, close) = if let Some(a) = after.strip_prefix(" -}}") {
            (true, a)
        } else if let Some(a) = after.strip_prefix("}}") {
            (false, a)
        } else {
            return Err(cx.err(line, "comment ends before closing delimiter"));
        };
        return Ok((None, s.len() - close.len(), trim));
    }
    let mut toks: Vec<Tok> = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    let mut cur_line = line;
    let mut spaced = true;
    loop {
        let Some(&c) = b.get(i) else { return Err(cx.err(line, "unclosed action: expected `}}`")) };
        let before = toks.len();
        let was_spaced = std::mem::replace(&mut spaced, matches!(c, b' ' | b'\t' | b'\r' | b'\n'));
        if s[i..].starts_with("}}") {
            return Ok((Some(toks), i + 2, false));
        }
        if c == b'-' && s[i + 1..].starts_with("}}") && i > 0 && GO_SPACE.contains(&char::from(b[i - 1])) {
            return Ok((Some(toks), i + 3, true));
        }
        match c {
            b'\n' => {
                cur_line += 1;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b'(' => {
                toks.push(Tok::LParen);
                i += 1;
            }
            b')' => {
                toks.push(Tok::RParen);
                i += 1;
                if b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
                    let (chain, n) = field_chain(&s[i..]);
                    toks.push(Tok::Chain(chain));
                    i += n;
                }
            }
            b'|' => {
                toks.push(Tok::Pipe);
                i += 1;
            }
            b',' => {
                toks.push(Tok::Comma);
                i += 1;
            }
            b':' if b.get(i + 1) == Some(&b'=') => {
                toks.push(Tok::Declare);
                i += 2;
            }
            b'=' => {
                toks.push(Tok::Assign);
                i += 1;
            }
            b'"' => {
                let (value, n) = lex_quoted(&s[i..]).ok_or_else(|| cx.err(cur_line, "unterminated or invalid quoted string"))?;
                toks.push(Tok::Str(value));
                i += n;
            }
            b'`' => {
                let end = s[i + 1..].find('`').ok_or_else(|| cx.err(cur_line, "unterminated raw string"))?;
                let raw = &s[i + 1..i + 1 + end];
                cur_line += raw.matches('\n').count();
                // `strconv.Unquote` drops carriage returns from raw strings (CRLF files).
                toks.push(Tok::Str(raw.replace('\r', "")));
                i += end + 2;
            }
            b'\'' => {
                let (c, n) = lex_char(&s[i..]).ok_or_else(|| cx.err(cur_line, "invalid character constant"))?;
                toks.push(Tok::Char(c));
                i += n;
            }
            b'/' => return Err(cx.err(cur_line, "unexpected `/` in action (a comment must start right after `{{` or `{{- `)")),
            // Go: a sign or a digit starts a number, and so does a `.` before a digit (`.5`).
            c if c.is_ascii_digit() || c == b'-' || c == b'+' || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) => {
                let bad = |n: usize| cx.err(cur_line, format!("bad number syntax: `{}`", &s[i..(i + n).min(s.len())]));
                let mut len = scan_number(&s[i..]).map_err(bad)?;
                // `1+2i`: a complex constant, written without spaces, ending in `i`.
                let complex = matches!(b.get(i + len), Some(b'+' | b'-'));
                if complex {
                    let more = scan_number(&s[i + len..]).map_err(|n| bad(len + n))?;
                    len += more;
                    if !s[..i + len].ends_with('i') {
                        return Err(bad(len));
                    }
                }
                toks.push(if complex { Tok::Complex(s[i..i + len].to_owned()) } else { Tok::Num(s[i..i + len].to_owned()) });
                i += len;
            }
            b'.' => {
                let (chain, n) = field_chain(&s[i..]);
                toks.push(Tok::Field(chain));
                i += n;
            }
            b'$' => {
                let name_len = s[i + 1..].bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
                let name = format!("${}", &s[i + 1..i + 1 + name_len]);
                i += 1 + name_len;
                let field_follows = b.get(i) == Some(&b'.') && b.get(i + 1).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_');
                let (chain, n) = if field_follows { field_chain(&s[i..]) } else { (Vec::new(), 0) };
                toks.push(Tok::Var(name, chain));
                i += n;
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let len = s[i..].bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
                toks.push(Tok::Ident(s[i..i + len].to_owned()));
                i += len;
            }
            _ => {
                let ch = s[i..].chars().next().unwrap_or('?');
                return Err(cx.err(cur_line, format!("unexpected character `{ch}` in action")));
            }
        }
        if !was_spaced && before > 0 && toks.len() > before && glued(&toks[before - 1], &toks[before]) {
            toks.insert(before, Tok::Glued);
        }
    }
}

/// Whether Go's parser refuses `next` right after `prev` with no space between: an operand
/// must be followed by a space, `|`, `)` or the end of the action.
fn glued(prev: &Tok, next: &Tok) -> bool {
    const KEYWORDS: &[&str] = &["if", "else", "with", "range", "end", "template", "block", "define", "break", "continue"];
    // Go's lexer: a word must end at a space, `.`, `,`, `|`, `:`, a parenthesis or `}}`.
    if matches!(prev, Tok::Ident(_)) && matches!(next, Tok::Str(_) | Tok::Char(_) | Tok::Var(..) | Tok::Num(_) | Tok::Complex(_)) {
        return true;
    }
    let ends_operand = match prev {
        Tok::Ident(w) => !KEYWORDS.contains(&w.as_str()),
        Tok::Field(_) | Tok::Var(..) | Tok::Chain(_) | Tok::Str(_) | Tok::Num(_) | Tok::Complex(_) | Tok::Char(_) | Tok::RParen => true,
        _ => false,
    };
    let starts_operand = match next {
        // `fn.x` chains a field onto a function's result: Go reads it as one operand.
        Tok::Field(chain) => !matches!(prev, Tok::Ident(_)) || chain.is_empty(),
        Tok::Var(..) | Tok::Ident(_) | Tok::Str(_) | Tok::Num(_) | Tok::Complex(_) | Tok::Char(_) | Tok::LParen => true,
        _ => false,
    };
    ends_operand && starts_operand
}

/// Reads `.a.b.c` (also `.` alone); returns the names and bytes consumed.
fn field_chain(s: &str) -> (Vec<String>, usize) {
    let b = s.as_bytes();
    let mut names = Vec::new();
    let mut i = 0;
    while b.get(i) == Some(&b'.') {
        let len = s[i + 1..].bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
        if len == 0 {
            // A lone `.` is dot itself, its own token after a chain (`.a.` is two operands).
            if names.is_empty() {
                i += 1;
            }
            break;
        }
        names.push(s[i + 1..i + 1 + len].to_owned());
        i += 1 + len;
    }
    (names, i)
}

/// A Go character constant (`'a'`, `'\n'`, `'\u00e9'`); returns it and the bytes consumed.
fn lex_char(s: &str) -> Option<(char, usize)> {
    let end = s[1..].find('\'').map(|e| e + 1)?;
    let end = if s[1..].starts_with("\\'") { s[3..].find('\'').map(|e| e + 3)? } else { end };
    let body = &s[1..end];
    // In a character constant `\xNN` and `\NNN` are the code point, not a byte.
    let numeric = match body.as_bytes() {
        [b'\\', b'x', h @ ..] if h.len() == 2 => u32::from_str_radix(&body[2..], 16).ok(),
        [b'\\', o @ ..] if o.len() == 3 && o.iter().all(|c| (b'0'..=b'7').contains(c)) => u32::from_str_radix(&body[1..], 8).ok(),
        _ => None,
    };
    if let Some(v) = numeric {
        return char::from_u32(v).filter(|_| v < 256).map(|c| (c, end + 1));
    }
    let quoted = format!("\"{}\"", if body == "\"" { "\\\"" } else { body });
    let (v, _) = lex_quoted(&quoted)?;
    let mut chars = v.chars();
    let c = chars.next()?;
    chars.next().is_none().then_some((c, end + 1))
}

/// A Go interpreted string literal (`strconv.Unquote`); returns the value and bytes consumed.
/// `None` for an unterminated literal or an escape Go rejects (such as `\'`).
fn lex_quoted(s: &str) -> Option<(String, usize)> {
    let mut bytes: Vec<u8> = Vec::new();
    let mut out = Bytes(&mut bytes);
    let mut chars = s.char_indices().skip(1);
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((super::value::from_go_bytes(&bytes), i + 1)),
            '\n' => return None,
            '\\' => {
                let (_, e) = chars.next()?;
                let mut hex = |n: usize| -> Option<u32> {
                    let mut v = 0u32;
                    for _ in 0..n {
                        v = v * 16 + chars.next()?.1.to_digit(16)?;
                    }
                    Some(v)
                };
                match e {
                    'a' => out.push('\x07'),
                    'b' => out.push('\x08'),
                    'f' => out.push('\x0c'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'v' => out.push('\x0b'),
                    '\\' => out.push('\\'),
                    '"' => out.push('"'),
                    // `\xNN` and octal escapes are bytes, which need not make UTF-8.
                    'x' => out.byte(u8::try_from(hex(2)?).ok()?),
                    'u' => out.push(char::from_u32(hex(4)?)?),
                    'U' => out.push(char::from_u32(hex(8)?)?),
                    '0'..='7' => {
                        let mut v = e.to_digit(8)?;
                        for _ in 0..2 {
                            v = v * 8 + chars.next()?.1.to_digit(8)?;
                        }
                        out.byte(u8::try_from(v).ok()?);
                    }
                    _ => return None,
                }
            }
            c => out.push(c),
        }
    }
    None
}

/// The bytes of a string literal being read.
struct Bytes<'a>(&'a mut Vec<u8>);

impl Bytes<'_> {
    fn push(&mut self, c: char) {
        let mut buf = [0; 4];
        self.0.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
    }

    fn byte(&mut self, b: u8) {
        self.0.push(b);
    }
}

struct Parser<'a, I: Iterator<Item = Item>> {
    cx: &'a Cx<'a>,
    items: std::iter::Peekable<I>,
    range_depth: usize,
    /// Variables in scope, as Go's parser tracks them: a use of any other is a parse error, even
    /// in a branch that never runs.
    vars: Vec<String>,
    /// Current nesting (control structures, parentheses, defines), against [`MAX_DEPTH`].
    depth: Cell<usize>,
    defines: BTreeMap<String, List>,
}

/// How a list ended: at end of input (`None`) or at a keyword action (`end`, `else ...`).
type End = Option<(usize, String)>;
/// As [`End`], with the tokens after the keyword (for `else if` / `else with`).
type EndWithRest = Option<(usize, String, Vec<Tok>)>;

impl<I: Iterator<Item = Item>> Parser<'_, I> {
    /// Parses nodes until end of input or an `end` / `else` action, which is returned (with the
    /// rest of its tokens kept for `else if` / `else with`).
    fn list(&mut self) -> Result<(List, End), Error> {
        let (list, end) = self.list_with_rest()?;
        Ok((list, end.map(|(line, word, _)| (line, word))))
    }

    /// Enters one level of nesting; an error past [`MAX_DEPTH`].
    fn enter(&self, line: usize) -> Result<(), Error> {
        let d = self.depth.get() + 1;
        if d > MAX_DEPTH {
            return Err(self.cx.err(line, format!("template nesting exceeds the limit of {MAX_DEPTH} levels")));
        }
        self.depth.set(d);
        Ok(())
    }

    fn leave(&self) {
        self.depth.set(self.depth.get().saturating_sub(1));
    }

    fn list_with_rest(&mut self) -> Result<(List, EndWithRest), Error> {
        let mut list = Vec::new();
        while let Some(item) = self.items.next() {
            let action = match item {
                Item::Text(t) => {
                    list.push(Node::Text(t));
                    continue;
                }
                Item::Action(a) => a,
            };
            let line = action.line;
            let mut toks = action.toks;
            if toks.is_empty() {
                return Err(self.cx.err(line, "empty action `{{}}`"));
            }
            let keyword = match &toks[0] {
                Tok::Ident(w) => w.clone(),
                _ => String::new(),
            };
            match keyword.as_str() {
                "end" | "else" => {
                    toks.remove(0);
                    return Ok((list, Some((line, keyword, toks))));
                }
                "if" | "with" => {
                    toks.remove(0);
                    self.enter(line)?;
                    let node = self.conditional(line, &keyword, toks);
                    self.leave();
                    list.push(node?);
                }
                "range" => {
                    toks.remove(0);
                    self.enter(line)?;
                    let node = self.range(line, toks);
                    self.leave();
                    list.push(node?);
                }

                "break" | "continue" => {
                    if self.range_depth == 0 {
                        return Err(self.cx.err(line, format!("`{keyword}` outside of `range`")));
                    }
                    if toks.len() > 1 {
                        return Err(self.cx.err(line, format!("unexpected words after `{keyword}`")));
                    }
                    list.push(if keyword == "break" { Node::Break } else { Node::Continue });
                }
                "define" | "block" => {
                    toks.remove(0);
                    if keyword == "define" && self.depth.get() > 0 {
                        return Err(self.cx.err(line, "`define` is allowed only at the top level of a file"));
                    }
                    let (name, rest) = match toks.split_first() {
                        Some((Tok::Str(n), rest)) => (n.clone(), rest.to_vec()),
                        _ => return Err(self.cx.err(line, format!("`{keyword}` needs a quoted template name"))),
                    };
                    let pipe = if keyword == "block" {
                        if rest.is_empty() {
                            return Err(self.cx.err(line, "`block` needs a pipeline"));
                        }
                        Some(self.pipeline(line, rest, false)?)
                    } else if !rest.is_empty() {
                        return Err(self.cx.err(line, "unexpected words after the name in `define`"));
                    } else {
                        None
                    };
                    // A defined template sees only `$` (its own dot), not the caller's variables.
                    let outer_vars = std::mem::replace(&mut self.vars, vec!["$".to_owned()]);
                    let outer_range = std::mem::replace(&mut self.range_depth, 0);
                    self.enter(line)?;
                    let body = self.list();
                    self.leave();
                    self.vars = outer_vars;
                    self.range_depth = outer_range;
                    let (body, end) = body?;
                    self.expect_end(line, &keyword, end)?;
                    self.add_define(line, &name, body)?;
                    if keyword == "block" {
                        list.push(Node::Template { line, name, pipe });
                    }
                }
                "template" => {
                    toks.remove(0);
                    let (name, rest) = match toks.split_first() {
                        Some((Tok::Str(n), rest)) => (n.clone(), rest.to_vec()),
                        _ => return Err(self.cx.err(line, "`template` needs a quoted template name")),
                    };
                    let pipe = if rest.is_empty() { None } else { Some(self.pipeline(line, rest, false)?) };
                    list.push(Node::Template { line, name, pipe });
                }
                _ => list.push(Node::Action(self.pipeline(line, toks, false)?)),
            }
        }
        Ok((list, None))
    }

    fn range(&mut self, line: usize, toks: Vec<Tok>) -> Result<Node, Error> {
        let scope = self.vars.len();
        let pipe = self.pipeline(line, toks, true)?;
        self.range_depth += 1;
        let body = self.list_with_rest();
        // As in Go, `break` / `continue` in the `else` part belong to an outer range.
        self.range_depth -= 1;
        let (body, end) = body?;
        let otherwise = match end {
            Some((_, w, rest)) if w == "else" && rest.is_empty() => {
                let (other, end) = self.list()?;
                self.expect_end(line, "range", end)?;
                Some(other)
            }
            Some((_, w, rest)) if w == "end" && rest.is_empty() => None,
            other => return Err(self.bad_end(line, "range", other)),
        };
        self.vars.truncate(scope);
        Ok(Node::Range { pipe, body, otherwise })
    }

    /// Records a `define`d template. As in Go, an empty body never replaces a non-empty one and
    /// two non-empty bodies for one name are an error.
    fn add_define(&mut self, line: usize, name: &str, body: List) -> Result<(), Error> {
        let empty = |l: &List| l.iter().all(|n| matches!(n, Node::Text(t) if t.trim_matches(GO_SPACE).is_empty()));
        match self.defines.get(name) {
            Some(old) if !empty(old) && !empty(&body) => {
                Err(self.cx.err(line, format!("template: multiple definition of template `{name}`")))
            }
            Some(old) if !empty(old) => Ok(()),
            _ => {
                self.defines.insert(name.to_owned(), body);
                Ok(())
            }
        }
    }

    fn conditional(&mut self, line: usize, keyword: &str, toks: Vec<Tok>) -> Result<Node, Error> {
        // Variables declared anywhere in the `if` / `with` (its pipelines, any branch) end with it.
        let scope = self.vars.len();
        let mut branches = Vec::new();
        let mut pipe = self.pipeline(line, toks, false)?;
        let otherwise = loop {
            let (body, end) = self.list_with_rest()?;
            branches.push((pipe, body));
            match end {
                Some((_, w, rest)) if w == "end" && rest.is_empty() => break None,
                Some((_, w, rest)) if w == "else" && rest.is_empty() => {
                    let (other, end) = self.list()?;
                    self.expect_end(line, keyword, end)?;
                    break Some(other);
                }
                Some((l, w, mut rest)) if w == "else" && rest.first() == Some(&Tok::Ident(keyword.to_owned())) => {
                    rest.remove(0);
                    pipe = self.pipeline(l, rest, false)?;
                }
                other => return Err(self.bad_end(line, keyword, other)),
            }
        };
        self.vars.truncate(scope);
        Ok(if keyword == "if" { Node::If { branches, otherwise } } else { Node::With { branches, otherwise } })
    }

    fn expect_end(&self, line: usize, keyword: &str, end: End) -> Result<(), Error> {
        match end {
            Some((_, w)) if w == "end" => Ok(()),
            Some((l, w)) => Err(self.cx.err(l, format!("unexpected `{w}` in `{keyword}` (opened at line {line}) after its `else`"))),
            None => Err(self.cx.err(line, format!("`{keyword}` has no matching `{{{{end}}}}`"))),
        }
    }

    fn bad_end(&self, line: usize, keyword: &str, end: EndWithRest) -> Error {
        match end {
            None => self.cx.err(line, format!("`{keyword}` has no matching `{{{{end}}}}`")),
            Some((l, w, _)) => self.cx.err(l, format!("unexpected words after `{w}` in `{keyword}` opened at line {line}")),
        }
    }

    fn pipeline(&mut self, line: usize, toks: Vec<Tok>, range: bool) -> Result<Pipe, Error> {
        let mut toks = toks.as_slice();
        let mut decl = Vec::new();
        let mut assign = false;
        // `$x :=`, `$x =`, and for range `$i, $e :=`.
        let decl_end = toks.iter().position(|t| matches!(t, Tok::Declare | Tok::Assign));
        if let Some(end) = decl_end {
            let names = &toks[..end];
            let ok = match names {
                [Tok::Var(a, c)] if c.is_empty() => {
                    decl.push(a.clone());
                    true
                }
                [Tok::Var(a, c1), Tok::Comma, Tok::Var(b, c2)] if range && c1.is_empty() && c2.is_empty() => {
                    decl.push(a.clone());
                    decl.push(b.clone());
                    true
                }
                _ => false,
            };
            if ok {
                assign = toks[end] == Tok::Assign;
                toks = &toks[end + 1..];
                // Go adds the names before parsing the rest (an assignment too; whether it
                // names a variable in scope is checked when it runs).
                self.vars.extend(decl.iter().cloned());
            } else if !names.is_empty() && !names.iter().any(|t| matches!(t, Tok::LParen)) {
                return Err(self.cx.err(line, "invalid variable declaration"));
            }
        }
        let (pipe, rest) = self.pipe_tokens(line, toks)?;
        if !rest.is_empty() {
            return Err(self.cx.err(line, "unexpected `)`"));
        }
        Ok(Pipe { line, decl, assign, cmds: pipe })
    }

    /// Parses commands separated by `|` until a `)` or the end; returns what is left (starting
    /// at the `)`).
    fn pipe_tokens<'t>(&self, line: usize, mut toks: &'t [Tok]) -> Result<(Vec<Cmd>, &'t [Tok]), Error> {
        let mut cmds = Vec::new();
        loop {
            let mut args = Vec::new();
            while let Some(t) = toks.first() {
                if matches!(t, Tok::Pipe | Tok::RParen) {
                    break;
                }
                let (arg, rest) = self.operand(line, toks)?;
                args.push(arg);
                toks = rest;
            }
            if args.is_empty() {
                return Err(self.cx.err(line, "missing value in pipeline"));
            }
            cmds.push(Cmd { args });
            match toks.first() {
                Some(Tok::Pipe) => toks = &toks[1..],
                _ => return Ok((cmds, toks)),
            }
        }
    }

    fn operand<'t>(&self, line: usize, toks: &'t [Tok]) -> Result<(Arg, &'t [Tok]), Error> {
        let rest = &toks[1..];
        let arg = match &toks[0] {
            Tok::Field(c) => Arg::Field(c.clone()),
            Tok::Var(n, c) => {
                if !self.vars.contains(n) {
                    return Err(self.cx.err(line, format!("undefined variable `{n}`")));
                }
                Arg::Var(n.clone(), c.clone())
            }
            Tok::Str(s) => Arg::Str(s.clone()),
            Tok::Num(n) => Arg::Num(parse_number(n, false).ok_or_else(|| self.cx.err(line, format!("illegal number syntax: `{n}`")))?),
            Tok::Complex(n) => Arg::Num(parse_number(n, true).ok_or_else(|| self.cx.err(line, format!("illegal number syntax: `{n}`")))?),
            Tok::Char(c) => {
                Arg::Num(Num { int: Some(*c as i64), float: Some(f64::from(*c as u32)), float_syntax: false, rune: true, complex: None })
            }
            Tok::Ident(w) => match w.as_str() {
                "true" => Arg::Bool(true),
                "false" => Arg::Bool(false),
                "nil" => Arg::Nil,
                "if" | "else" | "end" | "range" | "with" | "define" | "template" | "block" | "break" | "continue" => {
                    return Err(self.cx.err(line, format!("unexpected keyword `{w}` in a pipeline")));
                }
                name if funcs::is_defined(name) => Arg::Func(name.to_owned()),
                name => {
                    let hint = funcs::unsupported_reason(name).map(|r| format!(" ({r})")).unwrap_or_default();
                    return Err(self.cx.err(line, format!("function `{name}` is not defined{hint}")));
                }
            },
            Tok::LParen => {
                self.enter(line)?;
                let inner = self.pipe_tokens(line, rest);
                self.leave();
                let (cmds, after) = inner?;
                let Some(Tok::RParen) = after.first() else { return Err(self.cx.err(line, "unclosed `(`")) };
                let mut after = &after[1..];
                let mut chain = Vec::new();
                if let Some(Tok::Chain(c)) = after.first() {
                    chain = c.clone();
                    after = &after[1..];
                }
                return Ok((Arg::Sub(Box::new(Pipe { line, decl: Vec::new(), assign: false, cmds }), chain), after));
            }
            Tok::RParen => return Err(self.cx.err(line, "unexpected `)`")),
            Tok::Glued => return Err(self.cx.err(line, "unexpected operand right after another: Go needs a space between operands")),
            Tok::Chain(_) | Tok::Pipe | Tok::Declare | Tok::Assign | Tok::Comma => {
                return Err(self.cx.err(line, "unexpected token in pipeline"));
            }
        };
        Ok((arg, rest))
    }
}

/// Go's `scanNumber`: the length of the number at the start of `s` (sign, base prefix, digits
/// with `_`, fraction, exponent, `i`), or the length read when it runs into a letter or digit.
fn scan_number(s: &str) -> Result<usize, usize> {
    let b = s.as_bytes();
    let mut i = 0;
    let accept = |i: &mut usize, set: &[u8]| {
        if b.get(*i).is_some_and(|c| set.contains(c)) {
            *i += 1;
            true
        } else {
            false
        }
    };
    let run = |i: &mut usize, set: &[u8]| {
        while b.get(*i).is_some_and(|c| set.contains(c)) {
            *i += 1;
        }
    };
    accept(&mut i, b"+-");
    let mut digits: &[u8] = b"0123456789_";
    if accept(&mut i, b"0") {
        if accept(&mut i, b"xX") {
            digits = b"0123456789abcdefABCDEF_";
        } else if accept(&mut i, b"oO") {
            digits = b"01234567_";
        } else if accept(&mut i, b"bB") {
            digits = b"01_";
        }
    }
    run(&mut i, digits);
    if accept(&mut i, b".") {
        run(&mut i, digits);
    }
    if digits.len() == 11 && accept(&mut i, b"eE") {
        accept(&mut i, b"+-");
        run(&mut i, b"0123456789_");
    }
    if digits.len() == 23 && accept(&mut i, b"pP") {
        accept(&mut i, b"+-");
        run(&mut i, b"0123456789_");
    }
    accept(&mut i, b"i");
    match s[i..].chars().next() {
        Some(c) if c == '_' || c.is_alphanumeric() => Err(i + c.len_utf8()),
        _ => Ok(i),
    }
}

/// A Go number constant as `text/template`'s parser reads it (`newNumber`): an integer in any
/// base, a float (also an integer when it is integral), an imaginary or complex constant.
/// `None` is Go's "illegal number syntax" or "integer overflow".
fn parse_number(text: &str, complex: bool) -> Option<Num> {
    use super::gonum::{f64_to_i64, parse_float, parse_int, parse_uint};
    let mut n = Num { int: None, float: None, float_syntax: false, rune: false, complex: None };
    let imaginary = if complex {
        // `fmt.Sscan` of `re+imi` / `re-imi`.
        let split = text[1..].rfind(['+', '-']).map(|p| p + 1)?;
        let re = parse_float(&text[..split]).ok()?;
        let im = parse_float(text[split..].strip_suffix('i')?).ok()?;
        Some((re, im))
    } else if let Some(body) = text.strip_suffix('i') {
        parse_float(body).ok().map(|im| (0.0, im))
    } else {
        None
    };
    if let Some((re, im)) = imaginary {
        n.complex = Some((re, im));
        // Go's `simplifyComplex`: a zero imaginary part reads as the real number too.
        if im == 0.0 {
            n.float = Some(re);
            n.int = (f64_to_i64(re) as f64 == re).then_some(f64_to_i64(re));
        }
        return Some(n);
    }
    let uint = parse_uint(text, 0).ok();
    n.int = parse_int(text, 0).ok();
    if let Some(i) = n.int {
        n.float = Some(i as f64);
    } else if let Some(u) = uint {
        n.float = Some(u as f64);
    } else {
        let f = parse_float(text).ok()?;
        // It looks like an integer but is too large for one.
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return None;
        }
        n.float = Some(f);
        if f64_to_i64(f) as f64 == f {
            n.int = Some(f64_to_i64(f));
        }
    }
    let hex_int = text.len() > 2 && text.starts_with('0') && matches!(text.as_bytes()[1], b'x' | b'X') && !text.contains(['p', 'P']);
    n.float_syntax = n.float.is_some() && !hex_int && text.contains(['.', 'e', 'E', 'p', 'P']);
    // A uint beyond int64 is neither: Go's "overflows int" when used.
    if n.int.is_none() && !n.float_syntax && uint.is_some() {
        n.float = uint.map(|u| u as f64);
    }
    Some(n)
}
