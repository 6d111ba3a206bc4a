//! The compiled tier's runtime (`crates/hearth-jit-runtime`) held to
//! QuickJS on random input: `String(x)` for any number, `Number(s)` for
//! numeric-looking and arbitrary text, ToInt32 (`x | 0`) and `%`. The
//! same Rust is what compiled modules call, built to wasm32; the
//! differential tests (`differential.rs`) run it there.

// Tests unwrap: a failed unwrap is the test failing, at its line.
#![allow(clippy::unwrap_used)]

use hearth_jit_runtime::number;
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
