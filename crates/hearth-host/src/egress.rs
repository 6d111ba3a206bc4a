//! Where outbound HTTP may go, whatever a function's allow-list says:
//! never to this machine or its private networks unless the operator
//! allows it. A function allowed `127.0.0.1:8080`, or a name that
//! resolves there (a DNS answer can change between a check and the
//! connection), would otherwise reach the daemon's own API, a database on
//! the host, or a cloud's metadata service.
//!
//! Enforced twice: an address in the URL is checked before anything is
//! sent ([`refused_literal`]), and every name is resolved by [`Resolver`],
//! which drops refused addresses from the answer, so the connection can
//! only go where the check looked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Whether an address is this machine, a private or shared network,
/// link-local (cloud metadata services: 169.254.169.254, fd00:ec2::254),
/// multicast, broadcast or unspecified: anything but the public internet.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_internal_v4(v4),
            None => is_internal_v6(v6),
        },
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_unspecified()
        || a == 0 // "this network"
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT, 100.64/10
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking, 198.18/15
        || a >= 240 // reserved
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00 // unique local, fc00::/7
        || (first & 0xffc0) == 0xfe80 // link-local, fe80::/10
        || (first & 0xffc0) == 0xfec0 // site-local (deprecated), fec0::/10
        || embedded_v4(ip).is_some_and(is_internal_v4)
}

/// The IPv4 address an IPv6 address carries in a transition form, which
/// a gateway on the way may turn back into that IPv4 address: IPv4-
/// compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96` and the local-use
/// `64:ff9b:1::/48`), 6to4 (`2002:a.b.c.d::/16`) and Teredo
/// (`2001:0::/32`, whose client address is stored inverted). IPv4-mapped
/// addresses are handled before (`Ipv6Addr::to_ipv4_mapped`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] | [0x64, 0xff9b, 1, _, _, _, hi, lo] => Some(v4(hi, lo)),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        [0x2001, 0, _, _, _, _, hi, lo] => Some(v4(!hi, !lo)),
        _ => None,
    }
}

/// The address a URL's host names, if it is an internal one. `host` is
/// as the URL parser wrote it: IPv4 in dotted decimal whatever form it was
/// given in (`0x7f.1` is `127.0.0.1`), IPv6 in brackets.
pub(crate) fn refused_literal(host: &str) -> Option<IpAddr> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().ok().filter(|ip| is_internal(*ip))
}

/// Whether an allow-list entry (`host` or `host:port`) names this machine
/// or an internal address, so that no call to it could ever be let out.
pub fn is_internal_host(entry: &str) -> bool {
    let host = match entry.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() && !h.ends_with(':') => h,
        _ => entry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let lower = host.to_ascii_lowercase();
    lower == "localhost"
        || lower.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(is_internal)
}

/// The addresses a function may reach `host` on `port` at: what the
/// system's resolver answers, less this machine and its private networks
/// unless `private` (the operator's `--allow-private-egress`). Errors say
/// why, for the function's log.
pub async fn resolve_egress(
    host: &str,
    port: u16,
    private: bool,
) -> Result<Vec<SocketAddr>, String> {
    let all: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .collect();
    if private {
        return Ok(all);
    }
    let public: Vec<SocketAddr> = all
        .iter()
        .copied()
        .filter(|a| !is_internal(a.ip()))
        .collect();
    if public.is_empty() {
        let shown = all.first().map_or("nothing".into(), |a| a.ip().to_string());
        return Err(format!(
            "{host} resolves to {shown}, a loopback, private or link-local address: \
             functions may not reach those (an operator allows them with \
             --allow-private-egress)"
        ));
    }
    Ok(public)
}

/// Resolves names with the system's resolver and keeps only addresses
/// outside this machine and its private networks.
pub(crate) struct Resolver;

impl Resolve for Resolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(async move {
            let public = resolve_egress(name.as_str(), 0, false).await?;
            let addrs: Addrs = Box::new(public.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_entries_that_can_only_be_internal_are_recognised() {
        for entry in [
            "127.0.0.1:8080",
            "localhost",
            "LOCALHOST:80",
            "db.localhost",
            "[::1]:443",
            "10.0.0.5",
            "::1",
        ] {
            assert!(is_internal_host(entry), "{entry}");
        }
        for entry in [
            "example.com",
            "example.com:443",
            "1.1.1.1:80",
            "[2606:4700::1111]:443",
        ] {
            assert!(!is_internal_host(entry), "{entry}");
        }
    }

    #[test]
    fn addresses_in_urls_are_read_as_the_url_parser_writes_them() {
        for (url, refused) in [
            ("http://0x7f.1/", true),
            ("http://2130706433/", true),
            ("http://[::1]:8080/", true),
            ("http://[::ffff:a9fe:a9fe]/", true),
            ("http://example.com/", false),
            ("http://1.1.1.1/", false),
        ] {
            let u = reqwest::Url::parse(url).unwrap();
            let host = u.host_str().unwrap();
            assert_eq!(refused_literal(host).is_some(), refused, "{url} ({host})");
        }
    }

    #[test]
    fn internal_addresses_are_refused_and_public_ones_are_not() {
        for internal in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fc00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "ff02::1",
            "fec0::1",
            // Transition forms of internal IPv4 addresses.
            "::127.0.0.1",
            "::169.254.169.254",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101::",
            // Teredo: 127.0.0.1 and 10.0.0.1, inverted.
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            "2001:0:4136:e378:8000:63bf:f5ff:fffe",
        ] {
            assert!(is_internal(internal.parse().unwrap()), "{internal}");
        }
        for public in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "93.184.216.34",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
        ] {
            assert!(!is_internal(public.parse().unwrap()), "{public}");
        }
    }
}
