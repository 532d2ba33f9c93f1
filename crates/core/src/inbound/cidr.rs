//! IP allowlists: CIDR blocks and whether an address is in one.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A block of addresses: `203.0.113.0/24`, `2001:db8::/32`, or one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cidr {
    network: IpAddr,
    prefix_bits: u8,
}

/// Why a CIDR was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not an IP address or a CIDR block (like 203.0.113.0/24)")]
pub struct CidrError(String);

impl Cidr {
    /// Whether `address` is in this block. An IPv4 address written as
    /// IPv6 (`::ffff:a.b.c.d`, as a dual-stack listener reports it) is
    /// read as the IPv4 address.
    pub fn contains(&self, address: IpAddr) -> bool {
        match (self.network, address.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(addr)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.prefix_bits)).unwrap_or(0);
                u32::from(net) & mask == u32::from(addr) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(addr)) => {
                let mask = u128::MAX.checked_shl(128 - u32::from(self.prefix_bits)).unwrap_or(0);
                u128::from(net) & mask == u128::from(addr) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(text: &str) -> Result<Self, CidrError> {
        let error = || CidrError(text.chars().take(64).collect());
        let (address, bits) = match text.split_once('/') {
            Some((address, bits)) => (address, Some(bits)),
            None => (text, None),
        };
        let network: IpAddr = address.parse().map_err(|_| error())?;
        let network = network.to_canonical();
        let width = if network.is_ipv4() { 32 } else { 128 };
        let prefix_bits = match bits {
            None => width,
            Some(bits) if bits.bytes().all(|b| b.is_ascii_digit()) => bits.parse().map_err(|_| error())?,
            Some(_) => return Err(error()),
        };
        if prefix_bits > width {
            return Err(error());
        }
        Ok(Self { network, prefix_bits })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn an_ipv4_block_holds_its_addresses_and_no_others() {
        let block: Cidr = "203.0.113.0/24".parse().expect("cidr");
        assert!(block.contains(ip("203.0.113.7")));
        assert!(block.contains(ip("::ffff:203.0.113.200")));
        assert!(!block.contains(ip("203.0.114.1")));
        assert!(!block.contains(ip("2001:db8::1")));
    }

    #[test]
    fn a_single_address_and_the_whole_space_parse() {
        let one: Cidr = "10.0.0.1".parse().expect("cidr");
        assert!(one.contains(ip("10.0.0.1")) && !one.contains(ip("10.0.0.2")));
        let all: Cidr = "0.0.0.0/0".parse().expect("cidr");
        assert!(all.contains(ip("192.0.2.1")));
        let v6: Cidr = "2001:db8::/32".parse().expect("cidr");
        assert!(v6.contains(ip("2001:db8:ffff::1")) && !v6.contains(ip("2001:db9::1")));
        assert_eq!(v6.to_string(), "2001:db8::/32");
    }

    #[test]
    fn malformed_blocks_are_refused() {
        for bad in ["", "10.0.0.0/33", "10.0.0/8", "10.0.0.0/+8", "::/129", "example.com/8", "10.0.0.0/"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}
