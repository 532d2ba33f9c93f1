//! The SSRF guard's rules: which addresses and URLs a webhook may target.
//!
//! Pure functions, no IO: [`is_forbidden_ip`] classifies one address,
//! [`validate_target_url`] checks a URL's shape and, when its host is a literal
//! IP or `localhost`, its destination. Names that need DNS are checked at send
//! time by the resolver in [`crate::http`], which filters the resolved
//! addresses with [`is_forbidden_ip`]. The API calls [`validate_target_url`]
//! when an endpoint is registered, so a caller learns early what to fix.
//!
//! This module must not resolve names or open sockets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Longest accepted target URL, in bytes.
pub const URL_LENGTH_MAX: usize = 2048;

/// Why a target URL is refused. Messages tell the caller what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("url is {length} bytes long, the limit is {URL_LENGTH_MAX}")]
    TooLong { length: usize },
    #[error("url is not a valid absolute URL: {reason}")]
    Unparseable { reason: String },
    #[error("url must use http or https, got {scheme}")]
    BadScheme { scheme: String },
    #[error("url must name a host")]
    MissingHost,
    #[error("url must not carry credentials (user:pass@); put them in the endpoint's headers instead")]
    HasUserinfo,
    #[error(
        "url points at {ip}, a private, loopback, link-local or reserved address; \
         use a public address, or start the server with --allow-private-targets"
    )]
    ForbiddenAddress { ip: IpAddr },
    #[error(
        "url points at {host}, which is this machine; use a public host name, \
         or start the server with --allow-private-targets"
    )]
    Localhost { host: String },
}

impl TargetError {
    /// True when the URL is well formed but its destination is forbidden (as
    /// opposed to a malformed URL).
    pub fn is_forbidden_destination(&self) -> bool {
        matches!(self, TargetError::ForbiddenAddress { .. } | TargetError::Localhost { .. })
    }
}

/// Checks a webhook target URL and returns it parsed.
///
/// With `allow_private`, only the shape is checked (scheme, host, no userinfo,
/// length); without it, literal IPs that [`is_forbidden_ip`] refuses and the
/// names `localhost` / `*.localhost` are refused too. Other names are checked
/// when they are resolved, at send time.
pub fn validate_target_url(url: &str, allow_private: bool) -> Result<reqwest::Url, TargetError> {
    if url.len() > URL_LENGTH_MAX {
        return Err(TargetError::TooLong { length: url.len() });
    }
    let parsed = parse_target_url(url)?;
    check_target(&parsed, allow_private)?;
    Ok(parsed)
}

/// `url` parsed, or why it does not parse: the first step of
/// [`validate_target_url`], which an endpoint actor takes once per URL.
pub fn parse_target_url(url: &str) -> Result<reqwest::Url, TargetError> {
    reqwest::Url::parse(url).map_err(|e| TargetError::Unparseable { reason: e.to_string() })
}

/// [`validate_target_url`]'s checks of a URL already parsed, but for its
/// length (a property of the text as registered): what the transport runs
/// on every attempt, with the parse done once per endpoint.
pub fn check_target(parsed: &reqwest::Url, allow_private: bool) -> Result<(), TargetError> {
    match parsed.scheme() {
        "http" | "https" => {}
        other => return Err(TargetError::BadScheme { scheme: other.to_string() }),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(TargetError::HasUserinfo);
    }
    let host = match parsed.host_str() {
        Some(host) if !host.is_empty() => host,
        _ => return Err(TargetError::MissingHost),
    };
    if allow_private {
        return Ok(());
    }
    if let Some(ip) = literal_ip(host) {
        if is_forbidden_ip(ip) {
            return Err(TargetError::ForbiddenAddress { ip });
        }
    } else if is_localhost_name(host) {
        return Err(TargetError::Localhost { host: host.to_string() });
    }
    Ok(())
}

/// The IP of a URL host that is a literal address (`1.2.3.4`, `[::1]`).
fn literal_ip(host: &str) -> Option<IpAddr> {
    let unbracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    unbracketed.parse().ok()
}

/// `localhost`, `*.localhost` (RFC 6761), with or without a trailing dot.
fn is_localhost_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// True when a webhook must not be sent to `ip` unless private targets are
/// allowed: anything that is not a globally routable unicast address.
pub fn is_forbidden_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_forbidden_v4(v4),
        IpAddr::V6(v6) => is_forbidden_v6(v6),
    }
}

fn is_forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    a == 0                                    // "this network", incl. unspecified 0.0.0.0/8
        || a == 10                            // private 10/8
        || a == 127                           // loopback 127/8
        || (a == 100 && (64..=127).contains(&b)) // CGNAT 100.64/10
        || (a == 169 && b == 254)             // link-local 169.254/16 (cloud metadata)
        || (a == 172 && (16..=31).contains(&b)) // private 172.16/12
        || (a == 192 && b == 0 && c == 0)     // IETF protocol assignments 192.0.0/24
        || (a == 192 && b == 0 && c == 2)     // documentation TEST-NET-1
        || (a == 192 && b == 168)             // private 192.168/16
        || (a == 198 && (b == 18 || b == 19)) // benchmarking 198.18/15
        || (a == 198 && b == 51 && c == 100)  // documentation TEST-NET-2
        || (a == 203 && b == 0 && c == 113)   // documentation TEST-NET-3
        || a >= 224 // multicast 224/4, reserved 240/4, broadcast 255.255.255.255
}

fn is_forbidden_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if let Some(v4) = embedded_v4(ip) {
        return is_forbidden_v4(v4);
    }
    ip.is_unspecified()
        || ip.is_loopback()
        || (s[0] & 0xfe00) == 0xfc00                 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80                 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0                 // site-local fec0::/10 (deprecated)
        || (s[0] & 0xff00) == 0xff00                 // multicast ff00::/8
        || (s[0] == 0x2001 && s[1] == 0x0db8)        // documentation 2001:db8::/32
        || (s[0] & 0xfff0) == 0x3ff0                 // documentation 3fff::/20
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard-only 100::/64
        || (s[0] == 0x0064 && s[1] == 0xff9b && s[2] == 0x0001) // local-use NAT64 64:ff9b:1::/48
}

/// The IPv4 address an IPv6 form carries, for the forms that reach it:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d` (deprecated; `::`
/// and `::1` excluded, they are IPv6's own unspecified and loopback), NAT64
/// `64:ff9b::a.b.c.d` and 6to4 `2002:AABB:CCDD::`.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let low = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if let Some(mapped) = ip.to_ipv4_mapped() {
        return Some(mapped);
    }
    if s[..6] == [0; 6] {
        return (!ip.is_unspecified() && !ip.is_loopback()).then_some(low);
    }
    if s[..6] == [0x0064, 0xff9b, 0, 0, 0, 0] {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden(text: &str) -> bool {
        is_forbidden_ip(text.parse().expect("test address parses"))
    }

    #[test]
    fn ipv4_loopback_private_link_local_and_cgnat_are_forbidden() {
        for ip in [
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "192.168.255.255",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
        ] {
            assert!(forbidden(ip), "{ip} should be forbidden");
        }
    }

    #[test]
    fn ipv4_unspecified_broadcast_multicast_reserved_and_documentation_are_forbidden() {
        for ip in [
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "192.0.2.10",
            "198.51.100.7",
            "203.0.113.200",
            "192.0.0.170",
            "198.18.0.1",
        ] {
            assert!(forbidden(ip), "{ip} should be forbidden");
        }
    }

    #[test]
    fn ipv4_public_addresses_and_range_neighbours_are_allowed() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "169.253.0.1",
            "192.167.1.1",
            "192.0.3.1",
            "223.255.255.254",
            "11.0.0.1",
        ] {
            assert!(!forbidden(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn ipv6_special_ranges_are_forbidden() {
        for ip in [
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "3fff::1",
            "100::1",
            "64:ff9b:1::1",
        ] {
            assert!(forbidden(ip), "{ip} should be forbidden");
        }
    }

    #[test]
    fn ipv6_public_addresses_are_allowed() {
        for ip in ["2606:4700:4700::1111", "2001:4860:4860::8888", "fbff::1", "fe7f::1", "2001:db9::1"] {
            assert!(!forbidden(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn ipv4_mapped_and_compatible_ipv6_forms_follow_the_ipv4_rules() {
        for ip in [
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:0.0.0.0",
            "::127.0.0.1",
            "::192.168.1.1",
            "64:ff9b::127.0.0.1",
            "2002:7f00:1::1",
            "2002:a9fe:a9fe::",
        ] {
            assert!(forbidden(ip), "{ip} should be forbidden");
        }
        for ip in ["::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1"] {
            assert!(!forbidden(ip), "{ip} should be allowed");
        }
    }

    #[test]
    fn public_http_and_https_urls_are_accepted() {
        for url in [
            "https://example.com/hooks",
            "http://example.com:8080/x?y=1",
            "https://8.8.8.8/",
            "https://[2606:4700::1]/",
        ] {
            let parsed = validate_target_url(url, false).expect(url);
            assert!(parsed.host_str().is_some());
        }
    }

    #[test]
    fn non_http_schemes_are_refused_with_the_scheme_named() {
        let err = validate_target_url("ftp://example.com/file", false).unwrap_err();
        assert_eq!(err, TargetError::BadScheme { scheme: "ftp".into() });
        assert_eq!(err.to_string(), "url must use http or https, got ftp");
        for url in ["file:///etc/passwd", "gopher://example.com/", "javascript:alert(1)"] {
            assert!(matches!(validate_target_url(url, true), Err(TargetError::BadScheme { .. })), "{url}");
        }
    }

    #[test]
    fn userinfo_is_refused_even_when_private_targets_are_allowed() {
        for url in ["https://user:pass@example.com/", "https://user@example.com/", "https://:pass@example.com/"] {
            assert_eq!(validate_target_url(url, true), Err(TargetError::HasUserinfo), "{url}");
        }
    }

    #[test]
    fn unparseable_relative_and_hostless_urls_are_refused() {
        assert!(matches!(validate_target_url("not a url", false), Err(TargetError::Unparseable { .. })));
        assert!(matches!(validate_target_url("/relative/path", false), Err(TargetError::Unparseable { .. })));
        assert!(validate_target_url("http://", false).is_err());
    }

    #[test]
    fn urls_longer_than_2048_bytes_are_refused() {
        let base = "https://example.com/";
        let ok = format!("{base}{}", "a".repeat(URL_LENGTH_MAX - base.len()));
        assert!(validate_target_url(&ok, false).is_ok());
        let long = format!("{ok}a");
        assert_eq!(validate_target_url(&long, false), Err(TargetError::TooLong { length: URL_LENGTH_MAX + 1 }));
    }

    #[test]
    fn literal_forbidden_ips_are_refused_unless_private_targets_are_allowed() {
        for url in [
            "http://127.0.0.1:9000/",
            "http://10.0.0.5/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]:8080/",
            "http://[::ffff:127.0.0.1]/",
            "http://[fe80::1]/",
            "http://0.0.0.0/",
        ] {
            let err = validate_target_url(url, false).unwrap_err();
            assert!(matches!(err, TargetError::ForbiddenAddress { .. }), "{url}: {err}");
            assert!(err.is_forbidden_destination());
            assert!(validate_target_url(url, true).is_ok(), "{url} with allow_private");
        }
    }

    #[test]
    fn obfuscated_ipv4_literals_are_normalised_and_refused() {
        // The URL parser turns these into 127.0.0.1 before we look at them.
        for url in ["http://2130706433/", "http://0x7f.1/", "http://127.1/", "http://0177.0.0.1/"] {
            let err = validate_target_url(url, false).unwrap_err();
            assert!(matches!(err, TargetError::ForbiddenAddress { .. }), "{url}: {err}");
        }
    }

    #[test]
    fn localhost_names_are_refused_unless_private_targets_are_allowed() {
        for url in ["http://localhost:9000/", "http://LOCALHOST/", "http://localhost./", "http://api.localhost/"] {
            let err = validate_target_url(url, false).unwrap_err();
            assert!(matches!(err, TargetError::Localhost { .. }), "{url}: {err}");
            assert!(validate_target_url(url, true).is_ok(), "{url} with allow_private");
        }
        assert!(validate_target_url("http://notlocalhost.com/", false).is_ok());
    }

    mod hostile {
        use proptest::prelude::*;
        use reqwest::Url;
        use url_host::host_of;

        use super::*;

        /// The destination as the URL parser typed it, independent of the
        /// text checks under test.
        mod url_host {
            use std::net::IpAddr;

            pub enum Dest {
                Ip(IpAddr),
                Name(String),
            }

            pub fn host_of(url: &super::Url) -> Option<Dest> {
                match url.host()? {
                    url::Host::Ipv4(ip) => Some(Dest::Ip(ip.into())),
                    url::Host::Ipv6(ip) => Some(Dest::Ip(ip.into())),
                    url::Host::Domain(name) => Some(Dest::Name(name.to_string())),
                }
            }
        }

        /// URL-shaped text: odd schemes, credentials, hosts written every
        /// way an address can be (dotted, decimal, hex, bracketed IPv6,
        /// IPv4-mapped), names near `localhost`, ports and paths.
        fn url_text() -> impl Strategy<Value = String> {
            let scheme = prop::sample::select(vec!["http", "https", "HTTP", "ftp", "file", "javascript", ""]);
            let userinfo = prop::sample::select(vec!["", "user@", "user:pw@", ":@", "@"]);
            let host = prop_oneof![
                (any::<u8>(), any::<u8>(), any::<u8>(), any::<u8>())
                    .prop_map(|(a, b, c, d)| format!("{a}.{b}.{c}.{d}")),
                any::<u32>().prop_map(|n| n.to_string()),
                any::<u32>().prop_map(|n| format!("0x{n:x}")),
                any::<[u16; 8]>().prop_map(|s| format!("[{}]", s.map(|x| format!("{x:x}")).join(":"))),
                any::<[u8; 4]>().prop_map(|[a, b, c, d]| format!("[::ffff:{a}.{b}.{c}.{d}]")),
                prop::sample::select(vec![
                    "localhost",
                    "LOCALHOST.",
                    "a.localhost",
                    "localhost.com",
                    "example.com",
                    "0",
                    "127.1",
                    "0177.0.0.1",
                    "[::]",
                    "[::1]",
                    "",
                ])
                .prop_map(String::from),
                "[a-z0-9.%-]{0,20}",
            ];
            let port = prop_oneof![Just(String::new()), (0u32..100_000).prop_map(|p| format!(":{p}"))];
            let path = "(/[ -~]{0,20})?";
            (scheme, userinfo, host, port, path)
                .prop_map(|(scheme, userinfo, host, port, path)| format!("{scheme}://{userinfo}{host}{port}{path}"))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn an_accepted_target_is_http_without_credentials_and_never_private(
                text in prop_oneof![url_text(), "\\PC{0,80}"],
            ) {
                let strict = validate_target_url(&text, false);
                let lenient = validate_target_url(&text, true);
                if strict.is_ok() {
                    prop_assert!(lenient.is_ok(), "allowing private targets refuses nothing more: {text:?}");
                }
                if let Ok(url) = &lenient {
                    prop_assert!(text.len() <= URL_LENGTH_MAX);
                    prop_assert!(matches!(url.scheme(), "http" | "https"), "{url}");
                    prop_assert!(url.username().is_empty() && url.password().is_none(), "{url}");
                    prop_assert!(url.host_str().is_some_and(|h| !h.is_empty()), "{url}");
                }
                match (&strict, lenient.as_ref().ok().and_then(host_of)) {
                    (Ok(_), Some(url_host::Dest::Ip(ip))) => prop_assert!(!is_forbidden_ip(ip), "{text:?} -> {ip}"),
                    (Ok(_), Some(url_host::Dest::Name(name))) => {
                        let name = name.trim_end_matches('.').to_ascii_lowercase();
                        prop_assert!(name != "localhost" && !name.ends_with(".localhost"), "{text:?}");
                    }
                    (Err(error), Some(_)) => prop_assert!(error.is_forbidden_destination(), "{text:?}: {error}"),
                    _ => {}
                }
                if let Err(error) = &strict {
                    prop_assert!(!error.to_string().is_empty());
                }
            }

            #[test]
            fn an_over_long_url_is_refused_by_its_length(extra in 1usize..64) {
                let text = format!("https://example.com/{}", "a".repeat(URL_LENGTH_MAX - 20 + extra));
                prop_assert_eq!(
                    validate_target_url(&text, true),
                    Err(TargetError::TooLong { length: URL_LENGTH_MAX + extra })
                );
            }
        }
    }
}
