//! Header fidelity: every function `include/hip/hip_runtime_api.h` declares
//! (with its inline part, `hipmem_inline.h`) has HIP 6's signature, C++
//! default arguments included, and every template overload HIP declares for
//! it; its enums have HIP's values. The facts come from ROCm's own header
//! (`docs/hip-api-facts.txt`, which says where); both files are embedded, so
//! drift is caught wherever the test runs.

use std::collections::{BTreeMap, BTreeSet};

const FACTS: &str = include_str!("../../../docs/hip-api-facts.txt");
const HEADER: &str = include_str!("../../../include/hip/hip_runtime_api.h");
const INLINE: &str = include_str!("../../../include/hip/hipmem_inline.h");

/// A function or template overload: kind ("fn" or "tpl"), name, parameter types.
type Decl = (String, String, Vec<String>);

fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find("/*").into_iter().chain(rest.find("//")).min() {
        out.push_str(&rest[..i]);
        if rest[i..].starts_with("/*") {
            let end = rest[i + 2..].find("*/").map(|e| i + 2 + e + 2).unwrap_or(rest.len());
            out.push(' ');
            rest = &rest[end..];
        } else {
            let end = rest[i..].find('\n').map(|e| i + e).unwrap_or(rest.len());
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    out
}

/// Drops preprocessor lines (and their continuations).
fn strip_preprocessor(src: &str) -> String {
    let mut out = String::new();
    let mut continued = false;
    for line in src.lines() {
        if continued || line.trim_start().starts_with('#') {
            continued = line.trim_end().ends_with('\\');
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

const KEYWORDS: [&str; 10] =
    ["int", "char", "short", "long", "unsigned", "signed", "double", "float", "void", "size_t"];

/// Splits at top-level commas.
fn split_top(s: &str) -> Vec<String> {
    let (mut parts, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            _ => {}
        }
        if c == ',' && depth == 0 {
            parts.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        parts.push(cur);
    }
    parts
}

/// A parameter's type and default, with the name dropped and spacing normalized.
fn normalize(param: &str, template_names: &[String]) -> String {
    let p = param.trim();
    let (ty, default) = if let Some(i) = p.find("__dparm(") {
        let d = p[i + 8..].trim_end();
        (&p[..i], Some(d.strip_suffix(')').unwrap_or(d).to_owned()))
    } else if let Some(i) = p.find('=') {
        (&p[..i], Some(p[i + 1..].to_owned()))
    } else {
        (p, None)
    };
    let mut spaced = String::new();
    for c in ty.chars() {
        if c == '*' || c == '&' {
            while spaced.ends_with(' ') {
                spaced.pop();
            }
            spaced.push(c);
            spaced.push(' ');
        } else {
            spaced.push(c);
        }
    }
    let mut tokens: Vec<&str> =
        spaced.split_whitespace().filter(|t| *t != "struct" && *t != "enum").collect();
    if tokens.len() >= 2
        && is_ident(tokens[tokens.len() - 1])
        && !KEYWORDS.contains(&tokens[tokens.len() - 1])
    {
        tokens.pop();
    }
    let mut t = tokens.join(" ").replace(" *", "*").replace(" &", "&");
    t = t.replace("* *", "**");
    if t == "unsigned" {
        t = "unsigned int".into();
    }
    let t: String = t
        .split(' ')
        .map(|w| {
            let (core, tail) = w.split_at(w.find(['*', '&']).unwrap_or(w.len()));
            if template_names.iter().any(|n| n == core) { format!("T{tail}") } else { w.to_owned() }
        })
        .collect::<Vec<_>>()
        .join(" ");
    match default {
        Some(d) => {
            let d = d.trim();
            let d = if d == "NULL" || d == "nullptr" { "0" } else { d };
            format!("{t} = {d}")
        }
        None => t,
    }
}

/// The names a `template <...>` header declares.
fn template_names(header: &str) -> Vec<String> {
    let words: Vec<&str> = header.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
    words.windows(2).filter(|w| w[0] == "typename" || w[0] == "class").map(|w| w[1].to_owned()).collect()
}

/// Every function declaration or definition returning `hipError_t` or
/// `const char*` whose name starts with `hip`.
fn declarations(src: &str) -> Vec<Decl> {
    let src = strip_preprocessor(&strip_comments(src));
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    for ret in ["hipError_t", "const char*", "const char *"] {
        let mut from = 0;
        while let Some(off) = src[from..].find(ret) {
            let start = from + off;
            from = start + ret.len();
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let mut rest = src[from..].trim_start();
            for word in ["__host__", "inline"] {
                if let Some(r) = rest.strip_prefix(word) {
                    if r.starts_with(char::is_whitespace) {
                        rest = r.trim_start();
                    }
                }
            }
            let name_len =
                rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
            let name = &rest[..name_len];
            // hipmem's own extensions (`hipmem*`, e.g. `hipmemSetInnerBackend`)
            // are not HIP's: ROCm's header has nothing to compare them with.
            let hips = name.starts_with("hip") && !name.starts_with("hipmem");
            if !hips || !rest[name_len..].trim_start().starts_with('(') {
                continue;
            }
            let open = src.len() - rest[name_len..].trim_start().len();
            let (mut depth, mut close) = (0i32, open);
            for (i, c) in src[open..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    close = open + i;
                    break;
                }
            }
            let after = src[close + 1..].trim_start();
            if !(after.starts_with(';') || after.starts_with('{')) {
                continue;
            }
            // What stands before the return type: a template header?
            let mut before = src[..start].trim_end();
            loop {
                let trimmed = ["static", "inline", "__host__"].iter().find_map(|w| {
                    before.strip_suffix(w).filter(|b| b.ends_with(char::is_whitespace) || b.is_empty())
                });
                match trimmed {
                    Some(b) => before = b.trim_end(),
                    None => break,
                }
            }
            let mut kind = "fn";
            let mut names = Vec::new();
            if before.ends_with('>') {
                if let Some(t) = before.rfind("template") {
                    let header = before[t + "template".len()..].trim();
                    if header.starts_with('<') {
                        kind = "tpl";
                        names = template_names(header);
                    }
                }
            }
            let mut params: Vec<String> =
                split_top(&src[open + 1..close]).iter().map(|p| normalize(p, &names)).collect();
            if params == ["void"] {
                params.clear();
            }
            out.push((kind.to_owned(), name.to_owned(), params));
        }
    }
    out
}

/// The enumerators of `typedef enum NAME { ... } NAME;` with their values.
fn enum_values(src: &str, name: &str) -> Option<BTreeMap<String, i64>> {
    let src = strip_comments(src);
    let start = src.find(&format!("typedef enum {name} {{"))?;
    let body_start = start + src[start..].find('{')? + 1;
    let body_end = body_start + src[body_start..].find('}')?;
    let (mut values, mut next) = (BTreeMap::new(), 0i64);
    for item in src[body_start..body_end].split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => {
                let v = v.trim();
                let value = values.get(v).copied().unwrap_or_else(|| {
                    let v = v.trim_start_matches("0x");
                    i64::from_str_radix(v, if item.contains("0x") { 16 } else { 10 })
                        .unwrap_or_else(|_| panic!("{name}: cannot read the value of {item}"))
                });
                (k.trim().to_owned(), value)
            }
            None => (item.to_owned(), next),
        };
        next = value + 1;
        values.insert(key, value);
    }
    Some(values)
}

struct Facts {
    decls: BTreeSet<Decl>,
    enums: BTreeMap<String, BTreeMap<String, i64>>,
}

fn facts() -> Facts {
    let mut decls = BTreeSet::new();
    let mut enums: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for line in FACTS.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (kind, rest) = line.split_once(' ').expect("a fact has a kind");
        match kind {
            "fn" | "tpl" => {
                let open = rest.find('(').expect("a function fact has parameters");
                let params = rest[open + 1..].strip_suffix(')').expect("a function fact ends with )");
                let params: Vec<String> = split_top(params).iter().map(|p| normalize(p, &[])).collect();
                decls.insert((kind.to_owned(), rest[..open].to_owned(), params));
            }
            "enum" => {
                let mut words = rest.split_whitespace();
                let (ty, name, eq, value) = (words.next(), words.next(), words.next(), words.next());
                assert_eq!(eq, Some("="), "enum fact: {line}");
                enums
                    .entry(ty.unwrap().to_owned())
                    .or_default()
                    .insert(name.unwrap().to_owned(), value.unwrap().parse().unwrap());
            }
            other => panic!("unknown fact kind {other:?}: {line}"),
        }
    }
    Facts { decls, enums }
}

fn ours() -> Vec<Decl> {
    let mut d = declarations(HEADER);
    d.extend(declarations(INLINE));
    d
}

#[test]
fn the_parser_reads_hip_declarations() {
    let d = declarations(
        "/* c */ hipError_t hipA(void* p, size_t n __dparm(0)); // x\n#define X 1\n\
         template <class T> static inline hipError_t hipB(T** p, unsigned flags = NULL) { return 0; }\n\
         static hipError_t __host__ inline hipC(int* a, const void * f, struct hipFoo *x);\n\
         hipError_t notHip(int);\nconst char* hipD(void);",
    );
    assert_eq!(
        d,
        vec![
            ("fn".into(), "hipA".into(), vec!["void*".into(), "size_t = 0".into()]),
            ("tpl".into(), "hipB".into(), vec!["T**".into(), "unsigned int = 0".into()]),
            ("fn".into(), "hipC".into(), vec!["int*".into(), "const void*".into(), "hipFoo*".into()]),
            ("fn".into(), "hipD".into(), vec![]),
        ]
    );
}

#[test]
fn every_declaration_has_hips_signature_and_defaults() {
    let facts = facts();
    let ours = ours();
    assert!(ours.len() >= 130, "only {} declarations found: the parser lost some", ours.len());
    let wrong: Vec<String> = ours
        .iter()
        .filter(|d| !facts.decls.contains(*d))
        .map(|(k, n, p)| {
            let hip: Vec<String> = facts
                .decls
                .iter()
                .filter(|(fk, fnm, _)| fk == k && fnm == n)
                .map(|(_, _, fp)| fp.join(", "))
                .collect();
            format!("{k} {n}({}) — HIP: {hip:?}", p.join(", "))
        })
        .collect();
    assert!(wrong.is_empty(), "declarations that differ from HIP 6's:\n{}", wrong.join("\n"));
}

#[test]
fn every_hip_overload_in_the_facts_is_declared() {
    let ours: BTreeSet<Decl> = ours().into_iter().collect();
    let missing: Vec<String> = facts()
        .decls
        .iter()
        .filter(|d| !ours.contains(*d))
        .map(|(k, n, p)| format!("{k} {n}({})", p.join(", ")))
        .collect();
    assert!(missing.is_empty(), "HIP's overloads the header no longer declares:\n{}", missing.join("\n"));
}

#[test]
fn enums_have_hips_values() {
    for (name, hip) in facts().enums {
        let ours = enum_values(HEADER, &name).unwrap_or_else(|| panic!("the header has no enum {name}"));
        assert_eq!(ours, hip, "enum {name} differs from HIP 6's");
    }
}

#[test]
fn defaults_and_templates_real_programs_need_are_there() {
    let ours: BTreeSet<Decl> = ours().into_iter().collect();
    let has = |kind: &str, name: &str, params: &[&str]| {
        ours.contains(&(kind.to_owned(), name.to_owned(), params.iter().map(|p| p.to_string()).collect()))
    };
    // The calls the failing programs made.
    assert!(has(
        "fn",
        "hipMemcpyAsync",
        &["void*", "const void*", "size_t", "hipMemcpyKind", "hipStream_t = 0"]
    ));
    assert!(has("fn", "hipMallocManaged", &["void**", "size_t", "unsigned int = hipMemAttachGlobal"]));
    assert!(has("tpl", "hipMalloc", &["T**", "size_t"]));
    assert!(has(
        "tpl",
        "hipMemcpyToSymbol",
        &["const T&", "const void*", "size_t", "size_t = 0", "hipMemcpyKind = hipMemcpyHostToDevice"]
    ));
    assert!(has("tpl", "hipOccupancyMaxPotentialBlockSize", &["int*", "int*", "T", "size_t = 0", "int = 0"]));
}
