//! Times as every surface and the RO-Crate show them: RFC 3339 UTC with milliseconds.

/// RFC 3339 UTC text of milliseconds since the epoch (`1970-01-01T00:00:00.000Z`); empty for a
/// time outside what RFC 3339 can write.
pub fn rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms).map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc_milliseconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_764_616_741_123), "2025-12-01T19:19:01.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
