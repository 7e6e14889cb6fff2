//! The functions' names: which may be called, with how many arguments, and why the few
//! stacksync refuses are refused. Read when a template is parsed (`parse.rs`) and when a
//! function is called (`funcs/mod.rs`).

/// slim-sprig functions stacksync refuses, with the reason given in the error.
const REFUSED: &[(&str, &str)] = &[
    ("env", "reads the environment of the process, which differs between stacksync and the operator"),
    ("expandenv", "reads the environment of the process, which differs between stacksync and the operator"),
    ("getHostByName", "resolves names over the network at render time"),
    ("randInt", "random output cannot be synchronised"),
    ("now", "reads the clock: the output would change on every render"),
    ("ago", "reads the clock: the output would change on every render"),
    ("call", "values templates have no function values to call"),
];

/// Whether `name` may be called (checked when a template is parsed, as Go does).
pub(crate) fn is_defined(name: &str) -> bool {
    arity(name).is_some()
}

/// Why a known Go/sprig function is not available, for the parse error.
pub fn unsupported_reason(name: &str) -> Option<String> {
    if let Some((_, why)) = REFUSED.iter().find(|(n, _)| *n == name) {
        return Some(format!("slim-sprig's `{name}` is not provided: {why}"));
    }
    const HELM: &[&str] = &["include", "tpl", "lookup", "fromYaml", "fromYamlArray", "toToml", "fromJsonArray", "mustToYaml"];
    if HELM.contains(&name) {
        return Some("a helm function, not available to values templates, which the operator runs with slim-sprig only".to_owned());
    }
    None
}

/// The number of arguments a function takes: (min, max), `None` for variadic. Go checks it when
/// the function is called.
pub(super) fn arity(name: &str) -> Option<(usize, Option<usize>)> {
    let n = |a: usize| Some((a, Some(a)));
    let v = |a: usize| Some((a, None));
    match name {
        "and" | "or" | "eq" => v(1),
        "not" | "len" => n(1),
        "index" => v(1),
        "print" | "println" | "html" | "js" | "urlquery" => v(0),
        "printf" => v(1),
        "ne" | "lt" | "le" | "gt" | "ge" => n(2),
        "hello" => n(0),
        "trim" | "upper" | "lower" | "title" | "sha1sum" | "sha256sum" | "adler32sum" | "toString" | "atoi" | "int64" | "int"
        | "float64" | "toDecimal" | "toStrings" | "until" | "add1" | "ceil" | "floor" | "sortAlpha" | "empty" | "compact"
        | "mustCompact" | "fromJson" | "toJson" | "toPrettyJson" | "toRawJson" | "mustFromJson" | "mustToJson" | "mustToPrettyJson"
        | "mustToRawJson" | "typeOf" | "kindOf" | "base" | "dir" | "clean" | "ext" | "isAbs" | "osBase" | "osClean" | "osDir" | "osExt"
        | "osIsAbs" | "b64enc" | "b64dec" | "b32enc" | "b32dec" | "values" | "first" | "mustFirst" | "rest" | "mustRest" | "last"
        | "mustLast" | "initial" | "mustInitial" | "reverse" | "mustReverse" | "uniq" | "mustUniq" | "fail" | "regexQuoteMeta"
        | "urlParse" | "urlJoin" | "toYaml" => n(1),
        "trunc" | "repeat" | "trimall" | "trimAll" | "trimSuffix" | "trimPrefix" | "contains" | "hasPrefix" | "hasSuffix" | "indent"
        | "nindent" | "split" | "splitList" | "sub" | "div" | "mod" | "join" | "typeIs" | "typeIsLike" | "kindIs" | "deepEqual" | "get"
        | "hasKey" | "append" | "push" | "mustAppend" | "mustPush" | "prepend" | "mustPrepend" | "has" | "mustHas" | "chunk"
        | "mustChunk" | "regexMatch" | "mustRegexMatch" | "regexFind" | "mustRegexFind" | "required" => n(2),
        "substr"
        | "replace"
        | "plural"
        | "splitn"
        | "untilStep"
        | "ternary"
        | "set"
        | "regexFindAll"
        | "mustRegexFindAll"
        | "regexReplaceAll"
        | "mustRegexReplaceAll"
        | "regexReplaceAllLiteral"
        | "mustRegexReplaceAllLiteral"
        | "regexSplit"
        | "mustRegexSplit" => n(3),
        "quote" | "squote" | "cat" | "seq" | "add" | "coalesce" | "all" | "any" | "tuple" | "list" | "dict" | "concat" | "keys" => v(0),
        "mul" | "max" | "biggest" | "min" | "maxf" | "minf" | "default" | "pick" | "omit" | "without" | "mustWithout" | "slice"
        | "mustSlice" | "unset" => v(1),
        "round" => v(2),
        "date" | "dateInZone" | "date_in_zone" | "htmlDate" | "htmlDateInZone" | "toDate" | "mustToDate" | "unixEpoch" | "dateModify"
        | "date_modify" | "mustDateModify" | "must_date_modify" | "duration" | "durationRound" => match name {
            "htmlDate" | "unixEpoch" | "duration" | "durationRound" => n(1),
            "dateInZone" | "date_in_zone" => n(3),
            _ => n(2),
        },
        "pluck" => v(1),
        "dig" => v(0),
        _ => None,
    }
    .filter(|_| !REFUSED.iter().any(|(n, _)| *n == name))
}
