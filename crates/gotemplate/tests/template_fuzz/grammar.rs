//! The generator: a seeded grammar of Go templates (text, trim markers, comments, every action,
//! pipelines of slim-sprig functions with well- and ill-typed arguments, variables, `define` /
//! `template`) and of Cluster-API-shaped data with typed corner values. Same seed, same cases.

use serde_json::{Value, json};

/// SplitMix64: small, fast, and the same sequence on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T: ?Sized>(&mut self, items: &[&'a T]) -> &'a T {
        items[self.below(items.len())]
    }

    pub fn one<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// A generated case.
#[derive(Debug, Clone)]
pub struct Case {
    pub template: String,
    pub data: Value,
}

/// What a parameter wants; the generator passes a fitting argument most of the time.
#[derive(Clone, Copy, PartialEq)]
enum P {
    /// Any string.
    S,
    /// A small int (counts, sizes, indices: Go allocates what it is asked for).
    I,
    /// A number, or a string or anything else that sprig converts to one.
    N,
    /// A list.
    L,
    /// A dict.
    D,
    /// Anything.
    A,
    /// A regular expression.
    Re,
    /// A bool.
    B,
    /// A JSON text.
    J,
    /// A URL.
    U,
    /// A path.
    Path,
    /// A time (or a Unix time as an int).
    T,
    /// A date layout.
    Layout,
    /// A duration text.
    Dur,
    /// A zone name Go and stacksync both know.
    Zone,
    /// A printf format.
    Fmt,
}

use P::*;

/// The functions generated, with their parameters; a trailing `true` makes the last one
/// repeatable (variadic). Not generated: the functions stacksync refuses (clock, environment,
/// network, randomness: `tests/conformance/known-differences.txt`), and `keys` / `values` alone
/// (Go's map order is random; `keys` is generated piped into `sortAlpha`).
const FUNCS: &[(&str, &[P], bool)] = &[
    ("hello", &[], false),
    ("trunc", &[I, S], false),
    ("trim", &[S], false),
    ("upper", &[S], false),
    ("lower", &[S], false),
    ("title", &[S], false),
    ("substr", &[I, I, S], false),
    ("repeat", &[I, S], false),
    ("trimall", &[S, S], false),
    ("trimAll", &[S, S], false),
    ("trimSuffix", &[S, S], false),
    ("trimPrefix", &[S, S], false),
    ("contains", &[S, S], false),
    ("hasPrefix", &[S, S], false),
    ("hasSuffix", &[S, S], false),
    ("quote", &[A], true),
    ("squote", &[A], true),
    ("cat", &[A], true),
    ("indent", &[I, S], false),
    ("nindent", &[I, S], false),
    ("replace", &[S, S, S], false),
    ("plural", &[S, S, I], false),
    ("sha1sum", &[S], false),
    ("sha256sum", &[S], false),
    ("adler32sum", &[S], false),
    ("toString", &[A], false),
    ("atoi", &[S], false),
    ("int64", &[N], false),
    ("int", &[N], false),
    ("float64", &[N], false),
    ("seq", &[I], true),
    ("toDecimal", &[N], false),
    ("split", &[S, S], false),
    ("splitList", &[S, S], false),
    ("splitn", &[S, I, S], false),
    ("toStrings", &[L], false),
    ("until", &[I], false),
    ("untilStep", &[I, I, I], false),
    ("add1", &[N], false),
    ("add", &[N], true),
    ("sub", &[N, N], false),
    ("div", &[N, N], false),
    ("mod", &[N, N], false),
    ("mul", &[N], true),
    ("biggest", &[N], true),
    ("max", &[N], true),
    ("min", &[N], true),
    ("maxf", &[N], true),
    ("minf", &[N], true),
    ("ceil", &[N], false),
    ("floor", &[N], false),
    ("round", &[N, I], false),
    ("round", &[N, I, N], false),
    ("join", &[S, L], false),
    ("sortAlpha", &[L], false),
    ("default", &[A, A], false),
    ("empty", &[A], false),
    ("coalesce", &[A], true),
    ("all", &[A], true),
    ("any", &[A], true),
    ("compact", &[L], false),
    ("mustCompact", &[L], false),
    ("fromJson", &[J], false),
    ("mustFromJson", &[J], false),
    ("toJson", &[A], false),
    ("toPrettyJson", &[A], false),
    ("toRawJson", &[A], false),
    ("mustToJson", &[A], false),
    ("mustToPrettyJson", &[A], false),
    ("mustToRawJson", &[A], false),
    ("ternary", &[A, A, B], false),
    ("typeOf", &[A], false),
    ("typeIs", &[S, A], false),
    ("typeIsLike", &[S, A], false),
    ("kindOf", &[A], false),
    ("kindIs", &[S, A], false),
    ("deepEqual", &[A, A], false),
    ("base", &[Path], false),
    ("dir", &[Path], false),
    ("clean", &[Path], false),
    ("ext", &[Path], false),
    ("isAbs", &[Path], false),
    ("osBase", &[Path], false),
    ("osClean", &[Path], false),
    ("osDir", &[Path], false),
    ("osExt", &[Path], false),
    ("osIsAbs", &[Path], false),
    ("b64enc", &[S], false),
    ("b64dec", &[S], false),
    ("b32enc", &[S], false),
    ("b32dec", &[S], false),
    ("tuple", &[A], true),
    ("list", &[A], true),
    ("dict", &[S, A], true),
    ("get", &[D, S], false),
    ("set", &[D, S, A], false),
    ("unset", &[D, S], false),
    ("hasKey", &[D, S], false),
    ("pluck", &[S, D], true),
    ("pick", &[D, S], true),
    ("omit", &[D, S], true),
    ("append", &[L, A], false),
    ("push", &[L, A], false),
    ("mustAppend", &[L, A], false),
    ("mustPush", &[L, A], false),
    ("prepend", &[L, A], false),
    ("mustPrepend", &[L, A], false),
    ("first", &[L], false),
    ("mustFirst", &[L], false),
    ("rest", &[L], false),
    ("mustRest", &[L], false),
    ("last", &[L], false),
    ("mustLast", &[L], false),
    ("initial", &[L], false),
    ("mustInitial", &[L], false),
    ("reverse", &[L], false),
    ("mustReverse", &[L], false),
    ("uniq", &[L], false),
    ("mustUniq", &[L], false),
    ("without", &[L, A], true),
    ("mustWithout", &[L, A], true),
    ("has", &[A, L], false),
    ("mustHas", &[A, L], false),
    ("slice", &[L], false),
    ("slice", &[L, I], false),
    ("slice", &[L, I, I], false),
    ("mustSlice", &[L, I, I], false),
    ("concat", &[L], true),
    ("dig", &[S, A, D], false),
    ("dig", &[S, S, A, D], false),
    ("chunk", &[I, L], false),
    ("mustChunk", &[I, L], false),
    ("fail", &[S], false),
    ("regexMatch", &[Re, S], false),
    ("mustRegexMatch", &[Re, S], false),
    ("regexFindAll", &[Re, S, I], false),
    ("mustRegexFindAll", &[Re, S, I], false),
    ("regexFind", &[Re, S], false),
    ("mustRegexFind", &[Re, S], false),
    ("regexReplaceAll", &[Re, S, S], false),
    ("mustRegexReplaceAll", &[Re, S, S], false),
    ("regexReplaceAllLiteral", &[Re, S, S], false),
    ("mustRegexReplaceAllLiteral", &[Re, S, S], false),
    ("regexSplit", &[Re, S, I], false),
    ("mustRegexSplit", &[Re, S, I], false),
    ("regexQuoteMeta", &[S], false),
    ("urlParse", &[U], false),
    ("urlJoin", &[D], false),
    ("date", &[Layout, T], false),
    ("dateInZone", &[Layout, T, Zone], false),
    ("date_in_zone", &[Layout, T, Zone], false),
    ("htmlDate", &[T], false),
    ("htmlDateInZone", &[T, Zone], false),
    ("unixEpoch", &[T], false),
    ("dateModify", &[Dur, T], false),
    ("date_modify", &[Dur, T], false),
    ("mustDateModify", &[Dur, T], false),
    ("must_date_modify", &[Dur, T], false),
    ("toDate", &[Layout, S], false),
    ("mustToDate", &[Layout, S], false),
    ("duration", &[N], false),
    ("durationRound", &[Dur], false),
    // Go's builtins (sprig's `slice` replaces Go's).
    ("and", &[A], true),
    ("or", &[A], true),
    ("not", &[A], false),
    ("len", &[A], false),
    ("index", &[A, A], true),
    ("print", &[A], true),
    ("println", &[A], true),
    ("printf", &[Fmt, A], true),
    ("eq", &[A, A], true),
    ("ne", &[A, A], false),
    ("lt", &[A, A], false),
    ("le", &[A, A], false),
    ("gt", &[A, A], false),
    ("ge", &[A, A], false),
    ("html", &[A], true),
    ("js", &[A], true),
    ("urlquery", &[A], true),
];

/// Strings with the corners: case mapping beyond ASCII, multi-byte runes, separators, numbers
/// in every Go syntax, base64 and base32 of arbitrary bytes, JSON, URLs.
const STRINGS: &[&str] = &[
    "",
    " ",
    "a",
    "abc",
    "Hello, World",
    "a,b,,c",
    "x-y_z.w",
    "  padded\t\n",
    "line1\nline2",
    "héllo wörld",
    "ß",
    "straße",
    "İstanbul",
    "ǆemal",
    "ǅ",
    "ŉ",
    "ﬀ",
    "ᾳ",
    "ΐ",
    "Σίσυφος",
    "ǰ",
    "日本語",
    "✓ ok",
    "😀x",
    "é",
    "\u{301}e",
    "\u{a0}nb\u{85}",
    "<a href=\"x\">&amp;'</a>",
    "42",
    "-7",
    "3.75",
    "1e3",
    ".5",
    "5.",
    "0x1F",
    "0x1p-2",
    "0X1.8P+1",
    "1_000",
    "1__0",
    "0b101",
    "0o17",
    "017",
    "+3",
    "-0",
    "-0.0",
    "Inf",
    "-inf",
    "NaN",
    "1e400",
    "9223372036854775808",
    "2.0",
    "true",
    "null",
    "aGVsbG8=",
    "aGVsbG8",
    "/w==",
    "gA==",
    "_-8",
    "a b",
    "NBSWY3DP",
    "NBSWY3D",
    "74======",
    "{\"a\":1,\"b\":[true,null,\"x\",2.5]}",
    "[1,2",
    "https://user:pw@example.com:8443/p/a?x=1&y=2#frag",
    "http://h/a b/ü?q=ä#f g",
    "mailto:x@y",
    "/a/b/../c/file.tar.gz",
    "a/b/",
    "%41%zz",
    "v1.29.3",
    "2024-03-05",
    "2024-03-05T10:20:30Z",
    "1h30m",
    "-1.5s",
    "300ms",
];

const REGEXES: &[&str] = &[
    "a",
    "[a-c]+",
    "^a",
    "b*",
    "(x)(y)?",
    "\\d+",
    "[[:alpha:]]+",
    "(?i)HELLO",
    "\\pL+",
    ".",
    "",
    "a|b*",
    "x{2,}",
    "(",
    "[z-a]",
    "\\b",
    "é+",
    "(?P<n>a)",
    "\\s",
];

const JSONS: &[&str] = &[
    "{\"a\":1,\"b\":[true,null,\"x\",2.5]}",
    "[1, 2.5, -0, 1e400, 3]",
    "1e400",
    "{\"x\": -1e999}",
    "\"\\ud800x\"",
    "\"\\u00e9\"",
    "[]",
    "{}",
    "null",
    "12345678901234567890",
    "1.0",
    "{\"a\":{\"b\":[1,{\"c\":null}]}}",
    "[1,2",
    "nope",
    "  [ \"a\" , 1e-400 ]  ",
    "{\"a\":1,\"a\":2}",
];

const URLS: &[&str] = &[
    "https://user:pw@example.com:8443/p/a?x=1&y=2#frag",
    "http://h/a%20b/%41?q=%zz#f%20g",
    "http://[::1]:80/x",
    "mailto:x@y",
    "/relative/path?x",
    "http://h/a b",
    "HTTP://Host/Path",
    "http://u%40x@h/",
    "://bad",
    "http://h/%",
];

const LAYOUTS: &[&str] =
    &["2006-01-02", "2006-01-02T15:04:05Z07:00", "Jan 2, 2006 at 3:04pm (MST)", "15:04:05.000", "Monday 02 Jan 06", "2006", "x"];

const DURATIONS: &[&str] = &["1h", "-30m", "1h30m5s", "1.5h", "300ms", "2us", "bad", "", "1d"];

const FORMATS: &[&str] = &[
    "%v",
    "%d",
    "%s",
    "%q",
    "%x",
    "%X",
    "%o",
    "%b",
    "%c",
    "%U",
    "%e",
    "%f",
    "%.2f",
    "%g",
    "%G",
    "%t",
    "%T",
    "%5v|%-5v|",
    "%+v",
    "%#v",
    "%08.3f",
    "%v %v",
    "%[2]v %[1]v",
    "%!",
    "%d%%",
    "%x % x",
    "%6.2s",
    "%+q",
    "%#q",
];

/// Number literals in every syntax Go's template parser accepts (and a few it refuses).
const NUMBERS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "-1",
    "-2",
    "10",
    "7",
    "1.5",
    "-0.5",
    ".5",
    "-.5",
    "5.",
    "0.0",
    "-0.0",
    "1e3",
    "1E-2",
    "0x10",
    "0X1f",
    "0o17",
    "017",
    "0b101",
    "1_000",
    "0x_1F",
    "0x1p-2",
    "0x1.8p1",
    "1i",
    "2.5i",
    "0i",
    "1e400",
    "'a'",
    "'\\n'",
    "'é'",
    "9223372036854775807",
    "-9223372036854775808",
    "1__0",
];

/// Keys of the generated `.v` map.
const KEYS: &[&str] = &["i", "neg", "zero", "f", "fint", "s", "empty", "num", "b", "nil", "l", "sl", "el", "m", "em", "u", "x"];

pub struct Gen {
    rng: Rng,
    /// Variables declared so far in the current scope.
    vars: Vec<String>,
    /// Nesting of `range` (for `break` / `continue`).
    in_range: usize,
    defines: Vec<String>,
}

impl Gen {
    pub fn new(seed: u64) -> Gen {
        Gen { rng: Rng::new(seed), vars: Vec::new(), in_range: 0, defines: Vec::new() }
    }

    /// The next case.
    pub fn case(&mut self) -> Case {
        self.vars.clear();
        self.in_range = 0;
        self.defines.clear();
        let data = self.data();
        let mut t = String::new();
        if self.rng.chance(15) {
            let name = self.rng.pick(&["d", "x.y", "p"]).to_owned();
            t.push_str(&format!("{{{{ define \"{name}\" }}}}"));
            let saved = std::mem::take(&mut self.vars);
            let body = {
                let n = 1 + self.rng.below(2);
                self.list(2, n)
            };
            self.vars = saved;
            t.push_str(&body);
            t.push_str("{{ end }}");
            self.defines.push(name);
        }
        let n = 1 + self.rng.below(4);
        t.push_str(&self.list(3, n));
        Case { template: t, data }
    }

    fn list(&mut self, depth: usize, n: usize) -> String {
        let mut out = String::new();
        for _ in 0..n {
            if self.rng.chance(50) {
                out.push_str(self.rng.pick(&["", " ", "\n", "a", " x ", "\n  ", "-", "é", "}"]));
            }
            out.push_str(&self.node(depth));
        }
        out
    }

    fn open(&mut self) -> &'static str {
        self.rng.pick(&["{{ ", "{{ ", "{{", "{{- ", "{{-\n"])
    }

    fn close(&mut self) -> &'static str {
        self.rng.pick(&[" }}", " }}", "}}", " -}}", "\t-}}"])
    }

    fn node(&mut self, depth: usize) -> String {
        let kind = if depth == 0 { 0 } else { self.rng.below(14) };
        let (o, c) = (self.open(), self.close());
        match kind {
            0..=5 => format!("{o}{}{c}", self.pipeline(2)),
            6 => {
                let name = format!("$v{}", self.rng.below(3));
                let p = self.pipeline(2);
                let assign = self.vars.contains(&name) && self.rng.chance(50);
                if !assign {
                    self.vars.push(name.clone());
                }
                format!("{o}{name} {} {p}{c}", if assign { "=" } else { ":=" })
            }
            7 | 8 => {
                let kw = self.rng.pick(&["if", "with"]);
                let scope = self.vars.len();
                let cond = self.pipeline(2);
                let body = {
                    let n = 1 + self.rng.below(2);
                    self.list(depth - 1, n)
                };
                let mut s = format!("{o}{kw} {cond}{c}{body}");
                if self.rng.chance(30) {
                    let cond = self.pipeline(1);
                    let body = self.list(depth - 1, 1);
                    s.push_str(&format!("{{{{ else {kw} {cond} }}}}{body}"));
                }
                if self.rng.chance(40) {
                    let body = self.list(depth - 1, 1);
                    s.push_str(&format!("{{{{ else }}}}{body}"));
                }
                self.vars.truncate(scope);
                s.push_str(self.rng.pick(&["{{ end }}", "{{- end }}", "{{end -}}"]));
                s
            }
            9 | 10 => {
                let scope = self.vars.len();
                let subject = if self.rng.chance(70) { self.operand(1, Some(L)) } else { self.pipeline(1) };
                let decl = match self.rng.below(3) {
                    0 => String::new(),
                    1 => {
                        self.vars.push("$e".into());
                        "$e := ".into()
                    }
                    _ => {
                        self.vars.push("$k".into());
                        self.vars.push("$e".into());
                        "$k, $e := ".into()
                    }
                };
                self.in_range += 1;
                let mut body = {
                    let n = 1 + self.rng.below(2);
                    self.list(depth - 1, n)
                };
                if self.rng.chance(15) {
                    body.push_str(self.rng.pick(&["{{ break }}", "{{ continue }}"]));
                }
                self.in_range -= 1;
                let mut s = format!("{o}range {decl}{subject}{c}{body}");
                if self.rng.chance(25) {
                    s.push_str(&format!("{{{{ else }}}}{}", self.list(depth - 1, 1)));
                }
                self.vars.truncate(scope);
                s.push_str("{{ end }}");
                s
            }
            11 if !self.defines.is_empty() => {
                let name = self.defines[0].clone();
                let arg = self.operand(1, None);
                format!("{o}template \"{name}\" {arg}{c}")
            }
            12 => format!("{{{{/* {} */}}}}", self.rng.pick(&["c", "", "x\ny"])),
            13 if self.in_range > 0 && self.rng.chance(50) => format!("{o}{}{c}", self.rng.pick(&["break", "continue"])),
            _ => format!("{o}{}{c}", self.pipeline(2)),
        }
    }

    fn pipeline(&mut self, depth: usize) -> String {
        let mut s = self.command(depth, true);
        let stages = if self.rng.chance(35) { 1 + self.rng.below(2) } else { 0 };
        for _ in 0..stages {
            s.push_str(" | ");
            s.push_str(&self.command(depth, false));
        }
        s
    }

    /// One command: a function call, or (first in a pipeline) an operand alone.
    fn command(&mut self, depth: usize, first: bool) -> String {
        if first && self.rng.chance(25) {
            return self.operand(depth, None);
        }
        let (name, params, variadic) = FUNCS[self.rng.below(FUNCS.len())];
        let mut n = params.len();
        if variadic {
            n = n.saturating_sub(1) + self.rng.below(3);
        }
        // Now and then the wrong number of arguments.
        if self.rng.chance(4) {
            n = if n > 0 && self.rng.chance(50) { n - 1 } else { n + 1 };
        }
        // Piped, the last argument comes from the pipeline: leave it out.
        if !first && n > 0 {
            n -= 1;
        }
        // Go allocates what these are asked for, without bound: only small counts for them.
        let counted = matches!(name, "until" | "untilStep" | "seq" | "repeat" | "indent" | "nindent");
        let mut s = name.to_owned();
        for i in 0..n {
            let p = params.get(i).or(params.last()).copied().unwrap_or(A);
            let p = if !counted && self.rng.chance(8) { A } else { p };
            s.push(' ');
            let depth = if counted { 0 } else { depth.saturating_sub(1) };
            s.push_str(&self.operand(depth, Some(p)));
        }
        if name == "keys" {
            s.push_str(" | sortAlpha");
        }
        s
    }

    /// An operand fitting `want` (anything when `None`).
    fn operand(&mut self, depth: usize, want: Option<P>) -> String {
        if depth > 0 && self.rng.chance(18) {
            let inner = self.pipeline(depth - 1);
            let field = if self.rng.chance(10) { ".a" } else { "" };
            return format!("({inner}){field}");
        }
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        match want.unwrap_or(A) {
            S | Path if self.rng.chance(75) => {
                if self.rng.chance(20) {
                    self.field(Some(S))
                } else if want == Some(Path) {
                    q(self.rng.pick(&["/a/b/../c/file.tar.gz", "a/b/", "", ".", "/", "x.y.z", "//a//b", "../..", "a/./b.c"]))
                } else {
                    q(self.rng.pick(STRINGS))
                }
            }
            I if self.rng.chance(80) || depth == 0 => {
                if self.rng.chance(15) {
                    self.field(Some(I))
                } else {
                    self.rng.pick(&["0", "1", "2", "3", "-1", "-2", "5", "-3", "4", "10", "1.0", "2.5", "\"3\""]).to_owned()
                }
            }
            N if self.rng.chance(80) => {
                if self.rng.chance(30) {
                    self.field(Some(N))
                } else if self.rng.chance(30) {
                    q(self.rng.pick(&["3", "-2", "1.5", "0x1p-2", "1_000", "0x10", "Inf", "NaN", "-0", "-0.0", "2.0", " 4", "1e3", ".5"]))
                } else {
                    self.rng.pick(NUMBERS).to_owned()
                }
            }
            L if self.rng.chance(80) => {
                if self.rng.chance(45) {
                    self.field(Some(L))
                } else {
                    let n = self.rng.below(4);
                    let items: Vec<String> = (0..n).map(|_| self.operand(0, None)).collect();
                    let f = self.rng.pick(&["list", "list", "tuple", "splitList \",\"", "regexFindAll \"a\"", "until"]);
                    match f {
                        "splitList \",\"" => format!("(splitList \",\" {})", q(self.rng.pick(&["a,b,,c", "", "x", "c,a,b"]))),
                        "regexFindAll \"a\"" => {
                            format!("(regexFindAll \"a\" {} {})", q(self.rng.pick(&["banana", "", "xyz"])), self.rng.below(5) as i64 - 1)
                        }
                        "until" => format!("(until {})", self.rng.below(5)),
                        f => format!("({f} {})", items.join(" ")),
                    }
                }
            }
            D if self.rng.chance(80) => {
                if self.rng.chance(40) {
                    self.field(Some(D))
                } else {
                    match self.rng.below(4) {
                        0 => "(dict)".to_owned(),
                        1 => format!("(dict \"a\" 1 \"b\" {})", self.operand(0, None)),
                        2 => format!("(urlParse {})", q(self.rng.pick(URLS))),
                        _ => format!(
                            "(dict \"scheme\" {} \"host\" {} \"path\" {} \"query\" {} \"fragment\" {} \"userinfo\" {})",
                            q(self.rng.pick(&["http", "https", "", "mailto"])),
                            q(self.rng.pick(&["h", "example.com:80", "", "a b", "[::1]", "ü.de"])),
                            q(self.rng.pick(&["/a b/ü", "/p/a", "", "x", "/%41", "/a?b#c", "/~!$&'()*+,;=:@"])),
                            q(self.rng.pick(&["x=1", "", "a b", "é"])),
                            q(self.rng.pick(&["", "f g", "frag", "é#"])),
                            q(self.rng.pick(&["", "u", "u:p", "a b:c@d", "ü"])),
                        ),
                    }
                }
            }
            Re if self.rng.chance(85) => q(self.rng.pick(REGEXES)),
            B if self.rng.chance(80) => {
                if self.rng.chance(30) {
                    self.field(Some(B))
                } else {
                    self.rng.pick(&["true", "false"]).to_owned()
                }
            }
            J if self.rng.chance(85) => q(self.rng.pick(JSONS)),
            U if self.rng.chance(85) => q(self.rng.pick(URLS)),
            T if self.rng.chance(85) => match self.rng.below(4) {
                0 => "0".to_owned(),
                1 => format!("{}", 1_700_000_000 + self.rng.below(100_000_000)),
                2 => format!("(toDate \"2006-01-02\" {})", q(self.rng.pick(&["2024-03-05", "1999-12-31", "2024-02-30"]))),
                _ => format!(
                    "(toDate \"2006-01-02T15:04:05Z07:00\" {})",
                    q(self.rng.pick(&["2024-03-05T10:20:30Z", "2024-03-05T10:20:30+02:00", "2001-01-01T00:00:00-07:30"]))
                ),
            },
            Layout if self.rng.chance(85) => q(self.rng.pick(LAYOUTS)),
            Dur if self.rng.chance(85) => q(self.rng.pick(DURATIONS)),
            Zone => q(self.rng.pick(&["UTC", "Local", ""])),
            Fmt if self.rng.chance(90) => q(self.rng.pick(FORMATS)),
            _ => self.any_operand(),
        }
    }

    fn any_operand(&mut self) -> String {
        match self.rng.below(10) {
            0..=3 => self.field(None),
            4 => self.rng.pick(NUMBERS).to_owned(),
            5 => serde_json::to_string(self.rng.pick(STRINGS)).unwrap_or_default(),
            6 => self.rng.pick(&["true", "false", "nil", ".", "$", "`raw\\n`", "\"\\xff\"", "\"\\u00e9\\t\""]).to_owned(),
            7 if !self.vars.is_empty() => {
                let v = self.vars[self.rng.below(self.vars.len())].clone();
                if self.rng.chance(20) { format!("{v}.a") } else { v }
            }
            8 => format!("(list {} {})", self.field(None), self.rng.pick(NUMBERS)),
            _ => self.field(None),
        }
    }

    /// A field of the data, preferring one of the wanted kind.
    fn field(&mut self, want: Option<P>) -> String {
        let keys: &[&str] = match want {
            Some(S) => &["s", "empty", "num", "u", "x"],
            Some(I) => &["i", "neg", "zero"],
            Some(N) => &["i", "neg", "zero", "f", "fint", "num"],
            Some(L) => &["l", "sl", "el"],
            Some(D) => &["m", "em", "nil"],
            Some(B) => &["b"],
            _ => KEYS,
        };
        let base = if self.rng.chance(80) { "." } else { "$." };
        match self.rng.below(12) {
            0 => format!("{base}Cluster.metadata.name"),
            1 => format!("{base}Cluster.spec.topology.variables"),
            2 => format!("{base}Cluster.metadata.labels"),
            3 => format!("{base}v.missing"),
            _ => format!("{base}v.{}", self.rng.pick(keys)),
        }
    }

    /// Data: a Cluster with typed topology variables, and `.v`, a map of corner values.
    fn data(&mut self) -> Value {
        let mut v = serde_json::Map::new();
        for k in KEYS {
            if self.rng.chance(8) {
                continue;
            }
            let value = match *k {
                "i" => json!(self.rng.one(&[3, 0, 1, -1, 42, 7])),
                "neg" => json!(-7),
                "zero" => json!(0),
                "f" => json!(self.rng.one(&[1.5, -0.5, 1e21, 1e-7, 0.1, 2.5, -0.0, 1e300])),
                "fint" => json!(2.0),
                "s" | "u" | "num" => json!(self.rng.pick(STRINGS)),
                "empty" => json!(""),
                "b" => json!(self.rng.chance(50)),
                "nil" => Value::Null,
                "l" => self.json_list(),
                "sl" => json!(["b", "a", "c", "a"]),
                "el" => json!([]),
                "m" => self.json_map(2),
                "em" => json!({}),
                _ => self.json_scalar(),
            };
            v.insert((*k).to_owned(), value);
        }
        let name = self.rng.pick(&["alpha", "prod-1", "ß-cluster", ""]);
        json!({
            "Cluster": {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": "team-a", "labels": {"env": "prod", "tier": "1"}},
                "spec": {
                    "controlPlaneEndpoint": {"host": "10.0.0.1", "port": 6443},
                    "topology": {"class": "openstack-alpha-1-29-v1", "version": "v1.29.3", "variables": [
                        {"name": "workerFlavor", "value": "SCS-4V-8"},
                        {"name": "replicas", "value": 3},
                        {"name": "dns", "value": ["8.8.8.8", "9.9.9.9"]},
                        {"name": "oidc", "value": {"issuer": "https://dex.example"}},
                    ]}
                }
            },
            "v": Value::Object(v),
        })
    }

    fn json_scalar(&mut self) -> Value {
        match self.rng.below(6) {
            0 => json!(self.rng.pick(STRINGS)),
            1 => json!(self.rng.below(20) as i64 - 5),
            2 => json!(self.rng.one(&[0.5, -2.25, 3.0, 1e-9, 123_456_789.0])),
            3 => json!(self.rng.chance(50)),
            4 => Value::Null,
            _ => json!(self.rng.pick(&["a", "b", "0x10", "1.5"])),
        }
    }

    fn json_list(&mut self) -> Value {
        let n = self.rng.below(5);
        Value::Array((0..n).map(|_| self.json_scalar()).collect())
    }

    fn json_map(&mut self, depth: usize) -> Value {
        let mut m = serde_json::Map::new();
        for _ in 0..self.rng.below(4) {
            let k = self.rng.pick(&["a", "b", "c", "scheme", "host", "path", "k"]).to_owned();
            let v = if depth > 0 && self.rng.chance(30) { self.json_map(depth - 1) } else { self.json_scalar() };
            m.insert(k, v);
        }
        Value::Object(m)
    }
}
