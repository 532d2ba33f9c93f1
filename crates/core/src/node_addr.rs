//! A node's address as the membership keeps it: `host:port`, nothing else.
//!
//! The scheme (HTTP or HTTPS) is the cluster's, set by `--tls-cert`, never
//! the address's: an address that named one could downgrade a TLS cluster.
//! No userinfo, path, query or whitespace either; the host is a DNS name,
//! an IPv4 address or a bracketed IPv6 address, the port 1 to 65535.

/// Longest address accepted (a DNS name is at most 253 characters).
pub const NODE_ADDR_CHARS_MAX: usize = 261;

/// Checks that `addr` is `host:port`; the error says what is wrong.
pub fn check_node_addr(addr: &str) -> Result<(), String> {
    let refuse = |why: &str| Err(format!("addr must be host:port ({why})"));
    if addr.is_empty() || addr.len() > NODE_ADDR_CHARS_MAX {
        return refuse(&format!("1 to {NODE_ADDR_CHARS_MAX} characters"));
    }
    if addr.contains("://") {
        return refuse("no scheme: the cluster's TLS setting decides it");
    }
    if addr.contains('@') {
        return refuse("no user or password");
    }
    if addr.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control() || b"/?#\\%".contains(&b)) {
        return refuse("no path, query, spaces or escapes");
    }
    let (host, port) = match addr.strip_prefix('[') {
        Some(rest) => {
            let Some((inside, port)) = rest.split_once("]:") else { return refuse("an IPv6 host is [addr]:port") };
            if inside.parse::<std::net::Ipv6Addr>().is_err() {
                return refuse("not an IPv6 address in the brackets");
            }
            (None, port)
        }
        None => {
            let Some((host, port)) = addr.rsplit_once(':') else { return refuse("no port") };
            (Some(host), port)
        }
    };
    if !port.bytes().all(|b| b.is_ascii_digit()) || !matches!(port.parse::<u32>(), Ok(1..=65_535)) {
        return refuse("the port is a number from 1 to 65535");
    }
    if let Some(host) = host {
        let label_ok = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        if host.is_empty() || !host.split('.').all(label_ok) {
            return refuse("the host is a DNS name or an IP address");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_pass() {
        for addr in ["node1:8080", "127.0.0.1:7000", "[::1]:7000", "hookraft-2.internal.example:443", "n_1:1"] {
            assert_eq!(check_node_addr(addr), Ok(()), "{addr}");
        }
    }

    #[test]
    fn schemes_userinfo_paths_and_bad_ports_are_refused() {
        let cases = [
            ("http://127.0.0.1:19999", "no scheme"),
            ("https://node1:8080", "no scheme"),
            ("user:pass@node1:8080", "no user"),
            ("node1:8080/internal", "no path"),
            ("node1:8080?x=1", "no path"),
            ("node 1:8080", "no path"),
            ("node1", "no port"),
            ("node1:", "the port"),
            ("node1:0", "the port"),
            ("node1:65536", "the port"),
            ("node1:+80", "the port"),
            (":8080", "the host"),
            ("-node:8080", "the host"),
            ("node..x:8080", "the host"),
            ("[::1]8080", "IPv6"),
            ("[zz]:8080", "IPv6"),
            ("::1:8080", "the host"),
            ("", "1 to"),
        ];
        for (addr, expected) in cases {
            let error = check_node_addr(addr).expect_err(addr);
            assert!(error.contains(expected), "{addr}: {error}");
        }
    }
}
