//! Shared types for every Hearth crate: what a function is, what an
//! invocation carries in and out, and how it can fail.
//!
//! This crate has no behaviour of its own and no I/O; it is the vocabulary of
//! `ARCHITECTURE.md` as types, so the store, the engines, the node and the API
//! agree on one meaning for "version", "tier" and "timeout".

pub mod byte_strings;
mod colocation;
mod error;
mod function;
mod headers;
mod invocation;
mod log_stream;

pub use colocation::Colocation;
pub use error::{InvokeError, LastOutput, ValidationError};
pub use function::{
    ByMode, FunctionSpec, FunctionVersion, HandlerName, Limits, RecordPolicy, Runtime, Tier,
    host_allowed, validate_alias_name, validate_env_name, validate_function_name,
    validate_tenant_name,
};
pub use headers::{EVENT_HEADER, REFUSED_HEADER, is_hop_by_hop};
pub use invocation::{GatewayAttempt, InvocationId, Request, Response};
pub use log_stream::LogStream;

/// Milliseconds since the Unix epoch, the unit of every stored timestamp
/// (0 if the clock is set before 1970).
pub fn unix_time_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Seconds in a duration written `90s`, `15m`, `12h` or `30d` (a bare
/// number is seconds); `None` if it is not one.
pub fn parse_duration_s(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = digits.parse().ok()?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return None,
    };
    n.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_with_their_unit() {
        use super::parse_duration_s as p;
        assert_eq!(p("90"), Some(90));
        assert_eq!(p("15m"), Some(900));
        assert_eq!(p("1h"), Some(3600));
        assert_eq!(p("30d"), Some(30 * 86_400));
        assert_eq!(p("1w"), None);
        assert_eq!(p("h"), None);
        assert_eq!(p(""), None);
    }
}
