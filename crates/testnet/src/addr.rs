//! The only addresses tests may use.

use std::net::IpAddr;

use crate::{Error, Result};

/// An interface address with prefix length, checked to lie in a test range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestAddr {
    /// The address.
    pub addr: IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl TestAddr {
    /// Parses `"198.18.0.1/24"` or `"2001:db8::1/64"`, refusing anything outside the test ranges.
    pub fn parse(s: &str) -> Result<Self> {
        let invalid = || Error::Invalid { what: "address/prefix", value: s.to_owned() };
        let (a, p) = s.split_once('/').ok_or_else(invalid)?;
        let addr: IpAddr = a.parse().map_err(|_| invalid())?;
        let prefix: u8 = p.parse().map_err(|_| invalid())?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(invalid());
        }
        check_test_addr(addr)?;
        Ok(Self { addr, prefix })
    }
}

impl std::fmt::Display for TestAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Accepts only 198.18.0.0/15 (RFC 2544) and 2001:db8::/32 (RFC 3849).
pub fn check_test_addr(addr: IpAddr) -> Result<()> {
    let ok = match addr {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            o[0] == 198 && (o[1] & 0xfe) == 18
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            s[0] == 0x2001 && s[1] == 0x0db8
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Error::AddressNotForTests { addr: addr.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_only_test_ranges() {
        assert!(TestAddr::parse("198.18.0.1/24").is_ok());
        assert!(TestAddr::parse("198.19.255.254/15").is_ok());
        assert!(TestAddr::parse("2001:db8:1::1/64").is_ok());
        for bad in ["10.0.0.1/8", "198.20.0.1/24", "192.168.1.1/24", "2001:db9::1/64", "8.8.8.8/32"] {
            assert!(matches!(TestAddr::parse(bad), Err(Error::AddressNotForTests { .. })), "{bad}");
        }
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["198.18.0.1", "198.18.0.1/33", "2001:db8::1/129", "x/24", ""] {
            assert!(matches!(TestAddr::parse(bad), Err(Error::Invalid { .. })), "{bad}");
        }
    }

    #[test]
    fn displays_as_parsed() {
        assert_eq!(
            TestAddr::parse("2001:db8::2/64").map(|a| a.to_string()).ok().as_deref(),
            Some("2001:db8::2/64")
        );
    }
}
