//! The compiled tier's runtime (`crates/hearth-jit-runtime`) held to
//! QuickJS on random input: `String(x)` for any number, `Number(s)` for
//! numeric-looking and arbitrary text, ToInt32 (`x | 0`) and `%`. The
//! same Rust is what compiled modules call, built to wasm32; the
//! differential tests (`differential.rs`) run it there.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use hearth_jit_runtime::{number, text};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rquickjs::{Context, Function, Runtime};

/// A QuickJS context and one function of it.
struct Js {
    _rt: Runtime,
    ctx: Context,
}

impl Js {
    fn new() -> Js {
        let rt = Runtime::new().unwrap();
        let ctx = Context::full(&rt).unwrap();
        Js { _rt: rt, ctx }
    }

    fn call<A, R>(&self, source: &str, args: A) -> R
    where
        A: for<'js> rquickjs::function::IntoArgs<'js>,
        R: for<'js> rquickjs::FromJs<'js>,
    {
        self.ctx.with(|ctx| {
            let f: Function = ctx.eval(source).unwrap();
            f.call(args).unwrap()
        })
    }
}

/// Numbers of every kind: any bit pattern (NaN payloads, subnormals, the
/// extremes), decimals with few digits (which print short), integers
/// around the print forms' edges (1e21, 2^53), and powers of ten.
fn numbers() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>().prop_map(f64::from_bits),
        (any::<i32>(), 0..12u32).prop_map(|(m, k)| f64::from(m) / 10f64.powi(k as i32)),
        (any::<i64>(), -30..30i32).prop_map(|(m, e)| (m as f64) * 10f64.powi(e)),
        (-330..310i32).prop_map(|e| 10f64.powi(e)),
        Just(-0.0),
    ]
}

fn shown(x: f64) -> String {
    let mut out = [0u8; number::MAX_LEN];
    let n = number::to_string(x, &mut out);
    String::from_utf8(out[..n].to_vec()).unwrap()
}

#[test]
fn string_of_any_number_is_quickjs_s() {
    let js = Js::new();
    TestRunner::new(Config::with_cases(20_000))
        .run(&numbers(), |x| {
            let want: String = js.call("(x) => String(x)", (x,));
            prop_assert_eq!(shown(x), want, "String({:e})", x);
            Ok(())
        })
        .unwrap();
}

/// Text that looks like a number, nearly (each part optional, so many
/// are malformed), and text that does not.
fn texts() -> impl Strategy<Value = String> {
    let space = "[ \t\n\r\u{b}\u{c}\u{a0}\u{feff}\u{2028}\u{3000}\u{1680}]{0,2}";
    let decimal = "[+-]?[0-9]{0,25}(\\.[0-9]{0,25})?([eE][+-]?[0-9]{0,4})?";
    let other = "[+-]?(Infinity|infinity|NaN|0[xXoObB][0-9a-fA-F_]{0,17}|[0-9]+_[0-9]+|\\.|e5)";
    let regex = |r: String| proptest::string::string_regex(&r).unwrap();
    prop_oneof![
        4 => regex(format!("{space}({decimal}){space}")),
        2 => regex(format!("{space}({other}){space}")),
        1 => any::<String>(),
    ]
}

#[test]
fn number_of_any_text_is_quickjs_s() {
    let js = Js::new();
    let too_long = std::cell::Cell::new(0);
    TestRunner::new(Config::with_cases(20_000))
        .run(&texts(), |s| {
            let want: f64 = js.call("(s) => Number(s)", (s.as_str(),));
            let units: Vec<u16> = s.encode_utf16().collect();
            match number::parse(&units, &mut vec![0; units.len()]) {
                Ok(got) => prop_assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "Number({:?}): {} here, {} in QuickJS",
                    s,
                    got,
                    want
                ),
                // Only a non-decimal literal past 64 bits leaves.
                Err(number::TooLong) => {
                    too_long.set(too_long.get() + 1);
                    let t = s.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
                    prop_assert!(t.len() > 18 && t.starts_with('0'), "{:?} left", s);
                }
            }
            Ok(())
        })
        .unwrap();
    assert!(too_long.get() < 100, "{} left", too_long.get());
}

#[test]
fn int32_and_remainder_of_any_numbers_are_quickjs_s() {
    let js = Js::new();
    TestRunner::new(Config::with_cases(20_000))
        .run(&(numbers(), numbers()), |(a, b)| {
            let int: i32 = js.call("(x) => x | 0", (a,));
            prop_assert_eq!(number::to_int32(a), int, "{:e} | 0", a);
            let rem: f64 = js.call("(a, b) => a % b", (a, b));
            let got = number::rem(a, b);
            prop_assert!(
                got.to_bits() == rem.to_bits() || (got.is_nan() && rem.is_nan()),
                "{:e} % {:e}: {} here, {} in QuickJS",
                a,
                b,
                got,
                rem
            );
            Ok(())
        })
        .unwrap();
}

/// A JSON number, nearly (each part optional, so some are malformed),
/// then what follows it in a document.
#[test]
fn json_numbers_are_quickjs_s() {
    let js = Js::new();
    let text = proptest::string::string_regex(
        "-?[0-9]{0,20}(\\.[0-9]{0,20})?([eE][+-]?[0-9]{0,4})?[,\\]} ]?",
    )
    .unwrap();
    TestRunner::new(Config::with_cases(20_000))
        .run(&text, |s| {
            let units: Vec<u16> = s.encode_utf16().collect();
            let got = number::json_number(&units, &mut vec![0; units.len()]);
            let literal = s.trim_end_matches([',', ']', '}', ' ']);
            // QuickJS's JSON.parse of the literal alone: its value, or
            // that it throws.
            let want: Option<f64> = js.call(
                "(s) => { try { return JSON.parse(s); } catch { return undefined; } }",
                (literal,),
            );
            match (got, want) {
                (Ok((x, n)), Some(w)) => {
                    prop_assert_eq!(n, literal.len(), "{:?}", s);
                    prop_assert_eq!(x.to_bits(), w.to_bits(), "{:?}", s);
                }
                // "01" reads as 0 and leaves the 1 to the parser, which
                // refuses it there.
                (Ok((_, n)), None) => prop_assert!(n < literal.len(), "{:?} read whole", s),
                (Err(_), None) => {}
                (Err(_), Some(w)) => prop_assert!(false, "{:?} refused, QuickJS reads {}", s, w),
            }
            Ok(())
        })
        .unwrap();
}

/// The response's UTF-8 is the standard library's lossy conversion for
/// any units: ASCII runs, every width, pairs and lone surrogates.
#[test]
fn utf8_of_any_units_is_the_standard_librarys() {
    let unit = prop_oneof![0u16..0x80, 0x80u16..0x800, 0xD800u16..0xE000, any::<u16>()];
    TestRunner::new(Config::with_cases(20_000))
        .run(&proptest::collection::vec(unit, 0..40), |units| {
            let mut out = vec![0; 3 * units.len()];
            let n = hearth_jit_runtime::text::utf8(&units, &mut out);
            let want = String::from_utf16_lossy(&units);
            prop_assert_eq!(&out[..n], want.as_bytes());
            Ok(())
        })
        .unwrap();
}

/// What the runtime's parser made, as a tree.
#[derive(Debug)]
enum Tree {
    Null,
    Bool(bool),
    Num(f64),
    Str(Vec<u16>),
    Arr(Vec<usize>),
    Obj(Vec<(usize, usize)>),
}

/// Builds [`Tree`]s in an arena (values are indices; keys are too, into
/// `keys`).
#[derive(Default)]
struct Trees {
    values: Vec<Tree>,
    keys: Vec<Vec<u16>>,
}

impl Trees {
    fn add(&mut self, t: Tree) -> usize {
        self.values.push(t);
        self.values.len() - 1
    }

    /// The canonical form `CANON` (below) gives QuickJS's value: strings
    /// as their units, object keys sorted and the last of a repeated key
    /// kept, `-0` apart from `0`.
    fn canon(&self, v: usize) -> String {
        let units = |u: &[u16]| {
            let list: Vec<String> = u.iter().map(u16::to_string).collect();
            format!("s{}", list.join(","))
        };
        match &self.values[v] {
            Tree::Null => "n".into(),
            Tree::Bool(b) => if *b { "t" } else { "f" }.into(),
            Tree::Num(x) if *x == 0.0 && x.is_sign_negative() => "#-0".into(),
            Tree::Num(x) => format!("#{}", shown(*x)),
            Tree::Str(u) => units(u),
            Tree::Arr(items) => {
                let items: Vec<String> = items.iter().map(|&i| self.canon(i)).collect();
                format!("[{}]", items.join(";"))
            }
            Tree::Obj(pairs) => {
                let mut last = std::collections::BTreeMap::new();
                for &(k, v) in pairs {
                    last.insert(self.keys[k].clone(), v);
                }
                let pairs: Vec<String> = last
                    .iter()
                    .map(|(k, &v)| format!("{}:{}", units(k), self.canon(v)))
                    .collect();
                format!("{{{}}}", pairs.join(";"))
            }
        }
    }
}

impl hearth_jit_runtime::json::Builder for Trees {
    type Value = usize;
    type List = Vec<(Option<usize>, usize)>;
    type Key = usize;

    fn null(&mut self) -> usize {
        self.add(Tree::Null)
    }
    fn boolean(&mut self, b: bool) -> usize {
        self.add(Tree::Bool(b))
    }
    fn number(&mut self, x: f64) -> usize {
        self.add(Tree::Num(x))
    }
    fn string(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u16])) -> usize {
        let mut u = vec![0; len];
        fill(&mut u);
        self.add(Tree::Str(u))
    }
    fn key(&mut self, len: usize, fill: &mut dyn FnMut(&mut [u16])) -> usize {
        let mut u = vec![0; len];
        fill(&mut u);
        self.keys.push(u);
        self.keys.len() - 1
    }
    fn with_scratch(
        &mut self,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]) -> Option<f64>,
    ) -> Option<f64> {
        f(&mut vec![0; len])
    }
    fn list(&mut self, _: bool) -> Self::List {
        Vec::new()
    }
    fn push(&mut self, list: &mut Self::List, key: Option<usize>, value: usize) {
        list.push((key, value));
    }
    fn finish(&mut self, list: Self::List, object: bool) -> usize {
        let t = if object {
            Tree::Obj(list.into_iter().map(|(k, v)| (k.unwrap(), v)).collect())
        } else {
            Tree::Arr(list.into_iter().map(|(_, v)| v).collect())
        };
        self.add(t)
    }
}

/// QuickJS's `JSON.parse` of a text (given as its units, so a lone
/// surrogate reaches it as one) in the canonical form of
/// [`Trees::canon`], or `!` where it throws.
const CANON: &str = r##"(codes) => {
  const text = codes.map((c) => String.fromCharCode(c)).join("");
  const units = (s) => "s" + Array.from({ length: s.length }, (_, i) => s.charCodeAt(i)).join(",");
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  const canon = (v) => {
    if (v === null) return "n";
    if (typeof v === "boolean") return v ? "t" : "f";
    if (typeof v === "number") return Object.is(v, -0) ? "#-0" : "#" + String(v);
    if (typeof v === "string") return units(v);
    if (Array.isArray(v)) return "[" + v.map(canon).join(";") + "]";
    return "{" + Object.keys(v).sort(cmp).map((k) => units(k) + ":" + canon(v[k])).join(";") + "}";
  };
  try { return canon(JSON.parse(text)); } catch { return "!"; }
}"##;

/// JSON text of every kind, nested a few deep, with JSON's whitespace
/// between tokens and escapes of every kind in strings (lone surrogates
/// too); then, often, one unit changed, dropped or added, so that much
/// of it is malformed.
fn json_texts() -> impl Strategy<Value = Vec<u16>> {
    let white = proptest::string::string_regex("[ \t\n\r]{0,2}")
        .unwrap()
        .boxed();
    let piece = prop_oneof![
        proptest::string::string_regex("[a-zA-Z0-9 ~é€😀]").unwrap(),
        proptest::string::string_regex(r#"\\["\\/bfnrt]"#).unwrap(),
        proptest::string::string_regex(r"\\u[0-9a-fA-F]{4}").unwrap(),
        prop_oneof![Just(r"\uD800".to_string()), Just(r"\uDC00x".to_string())],
    ];
    let string = proptest::collection::vec(piece, 0..6)
        .prop_map(|p| format!("\"{}\"", p.concat()))
        .boxed();
    let leaf = prop_oneof![
        Just("null".to_string()),
        Just("true".to_string()),
        Just("false".to_string()),
        proptest::string::string_regex(
            "-?(0|[1-9][0-9]{0,17})(\\.[0-9]{1,17})?([eE][+-]?[0-9]{1,3})?"
        )
        .unwrap(),
        string.clone(),
    ];
    let value = leaf.prop_recursive(5, 48, 5, move |inner| {
        let w = white.clone();
        prop_oneof![
            (proptest::collection::vec((inner.clone(), w.clone()), 0..5)).prop_map(|items| {
                let items: Vec<String> = items
                    .into_iter()
                    .map(|(v, w)| format!("{w}{v}{w}"))
                    .collect();
                format!("[{}]", items.join(","))
            }),
            (proptest::collection::vec((string.clone(), inner, w), 0..5)).prop_map(|pairs| {
                let pairs: Vec<String> = pairs
                    .into_iter()
                    .map(|(k, v, w)| format!("{w}{k}{w}:{w}{v}"))
                    .collect();
                format!("{{{}}}", pairs.join(","))
            }),
        ]
    });
    let edit = prop_oneof![
        3 => Just(None),
        1 => (any::<prop::sample::Index>(), any::<u8>(), 0..3u8).prop_map(Some),
    ];
    (value, edit).prop_map(|(text, edit)| {
        let mut units: Vec<u16> = text.encode_utf16().collect();
        if let Some((at, unit, how)) = edit {
            let i = at.index(units.len() + 1);
            let pick = b"\"\\{}[]:,.-e0 \x01\x1fu";
            let u = u16::from(pick[unit as usize % pick.len()]);
            match how {
                0 if i < units.len() => units[i] = u,
                1 if i < units.len() => {
                    units.remove(i);
                }
                _ => units.insert(i, u),
            }
        }
        units
    })
}

/// The runtime's `JSON.parse` takes what QuickJS's takes, refuses what
/// it throws on, and makes the same value, unit for unit.
#[test]
fn json_parse_of_any_text_is_quickjs_s() {
    let js = Js::new();
    TestRunner::new(Config::with_cases(5_000))
        .run(&json_texts(), |units| {
            let text = String::from_utf16_lossy(&units);
            let mut trees = Trees::default();
            let got = match hearth_jit_runtime::json::parse(&units, &mut trees) {
                Ok(v) => trees.canon(v),
                Err(_) => "!".into(),
            };
            let codes: Vec<i32> = units.iter().map(|&u| i32::from(u)).collect();
            let want: String = js.call(CANON, (codes,));
            prop_assert_eq!(got, want, "{:?}", text);
            Ok(())
        })
        .unwrap();
}

/// Arrays nested 64 deep parse; 65 are refused (the isolate parses
/// them instead).
#[test]
fn json_nesting_past_the_limit_is_refused() {
    let nested = |n: usize| -> Vec<u16> {
        format!("{}{}", "[".repeat(n), "]".repeat(n))
            .encode_utf16()
            .collect()
    };
    let limit = hearth_jit_runtime::json::MAX_DEPTH as usize;
    assert!(hearth_jit_runtime::json::parse(&nested(limit), &mut Trees::default()).is_ok());
    assert!(hearth_jit_runtime::json::parse(&nested(limit + 1), &mut Trees::default()).is_err());
}

/// `JSON.stringify` of any string (units of every kind: ASCII, controls,
/// escapes, pairs, lone and swapped surrogates) quotes as QuickJS's.
#[test]
fn json_quote_of_any_units_is_quickjs_s() {
    let js = Js::new();
    let unit = prop_oneof![0u16..0x80, 0u16..0x20, 0xD800u16..0xE000, any::<u16>(),];
    TestRunner::new(Config::with_cases(5_000))
        .run(&proptest::collection::vec(unit, 0..24), |units| {
            let mut out = vec![0; text::json_quote_room(units.len())];
            let n = text::json_quote(&units, &mut out);
            let codes: Vec<i32> = units.iter().map(|&u| i32::from(u)).collect();
            let want: Vec<i32> = js.call(
                r#"(codes) => {
                    const q = JSON.stringify(codes.map((c) => String.fromCharCode(c)).join(""));
                    return Array.from({ length: q.length }, (_, i) => q.charCodeAt(i));
                }"#,
                (codes,),
            );
            let got: Vec<i32> = out[..n].iter().map(|&u| i32::from(u)).collect();
            prop_assert_eq!(got, want, "{:?}", units);
            Ok(())
        })
        .unwrap();
}
