//! Distinguished names: strongSwan's text notation (`C=CH, O=Example, CN=moon`) to DER and
//! back, and the comparison identities and issuers use.
//!
//! strongSwan writes RDNs in encoding order (the first written is the first encoded, the
//! reverse of RFC 4514) and compares DNs attribute by attribute, string values without
//! regard to ASCII case or ASN.1 string type; so do we, so that an ID configured as text on
//! one side matches the certificate's subject on the other.

use x509_cert::attr::AttributeTypeAndValue;
use x509_cert::der::asn1::{ObjectIdentifier, SetOfVec};
use x509_cert::der::{Any, Encode, Tag, Tagged};
use x509_cert::name::{Name, RelativeDistinguishedName};

/// Attribute types by strongSwan's keywords, and how they are encoded.
const ATTRIBUTES: &[(&str, &str, Kind)] = &[
    ("C", "2.5.4.6", Kind::Printable),
    ("ST", "2.5.4.8", Kind::Text),
    ("L", "2.5.4.7", Kind::Text),
    ("O", "2.5.4.10", Kind::Text),
    ("OU", "2.5.4.11", Kind::Text),
    ("CN", "2.5.4.3", Kind::Text),
    ("SN", "2.5.4.5", Kind::Printable),
    ("serialNumber", "2.5.4.5", Kind::Printable),
    ("S", "2.5.4.4", Kind::Text),
    ("G", "2.5.4.42", Kind::Text),
    ("T", "2.5.4.12", Kind::Text),
    ("street", "2.5.4.9", Kind::Text),
    ("E", "1.2.840.113549.1.9.1", Kind::Ia5),
    ("Email", "1.2.840.113549.1.9.1", Kind::Ia5),
    ("emailAddress", "1.2.840.113549.1.9.1", Kind::Ia5),
    ("DC", "0.9.2342.19200300.100.1.25", Kind::Ia5),
    ("UID", "0.9.2342.19200300.100.1.1", Kind::Text),
];

#[derive(Clone, Copy)]
enum Kind {
    /// PrintableString.
    Printable,
    /// IA5String.
    Ia5,
    /// PrintableString when it can be, UTF8String otherwise.
    Text,
}

/// Parses a DN in strongSwan's notation (`C=CH, O=Example, CN=moon` or `/C=CH/O=Example`)
/// into its DER encoding. `\` escapes a separator.
pub(crate) fn parse(text: &str) -> Result<Vec<u8>, &'static str> {
    let mut rdns = Vec::new();
    for part in split(text.trim())? {
        let (key, value) = part.split_once('=').ok_or("a DN component without '='")?;
        let (key, value) = (key.trim(), value.trim());
        let &(_, oid, kind) = ATTRIBUTES
            .iter()
            .find(|(k, _, _)| k.eq_ignore_ascii_case(key))
            .ok_or("unknown DN attribute (C, ST, L, O, OU, CN, SN, S, G, T, street, E, DC, UID)")?;
        if value.is_empty() {
            return Err("a DN attribute with an empty value");
        }
        let tag = match kind {
            Kind::Printable if printable(value) => Tag::PrintableString,
            Kind::Ia5 if value.is_ascii() => Tag::Ia5String,
            Kind::Text if printable(value) => Tag::PrintableString,
            Kind::Text => Tag::Utf8String,
            Kind::Printable | Kind::Ia5 => return Err("characters this DN attribute cannot hold"),
        };
        let oid = ObjectIdentifier::new(oid).map_err(|_| "DN attribute type")?;
        let value = Any::new(tag, value.as_bytes()).map_err(|_| "DN attribute value too long")?;
        let set = SetOfVec::try_from(vec![AttributeTypeAndValue { oid, value }]).map_err(|_| "DN")?;
        rdns.push(RelativeDistinguishedName(set));
    }
    if rdns.is_empty() {
        return Err("an empty DN");
    }
    Name::from(x509_cert::name::RdnSequence(rdns)).to_der().map_err(|_| "DN too long")
}

/// Splits at unescaped `,` and `/`, dropping empty parts (a leading `/`).
fn split(text: &str) -> Result<Vec<String>, &'static str> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.push(chars.next().ok_or("a DN ending in '\\'")?),
            ',' | '/' => parts.push(core::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    parts.push(current);
    Ok(parts.into_iter().filter(|p| !p.trim().is_empty()).collect())
}

/// PrintableString's alphabet (X.680 §41.4).
fn printable(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b" '()+,-./:=?".contains(&b))
}

/// Whether two DNs are the same: the same attribute types in the same RDNs, values equal
/// ignoring ASCII case when both are strings, whatever their string types.
pub(crate) fn equal(a: &Name, b: &Name) -> bool {
    a.0.len() == b.0.len()
        && a.0.iter().zip(&b.0).all(|(x, y)| {
            x.0.len() == y.0.len()
                && x.0.iter().zip(y.0.iter()).all(|(p, q)| p.oid == q.oid && value_eq(&p.value, &q.value))
        })
}

/// [`equal`] on two DER encodings; anything that does not decode is unequal.
pub(crate) fn equal_der(a: &[u8], b: &[u8]) -> bool {
    use x509_cert::der::Decode;
    matches!((Name::from_der(a), Name::from_der(b)), (Ok(x), Ok(y)) if equal(&x, &y))
}

fn value_eq(a: &Any, b: &Any) -> bool {
    match (string(a), string(b)) {
        (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
        _ => a == b,
    }
}

/// The bytes of a string-typed value.
fn string(v: &Any) -> Option<&[u8]> {
    matches!(v.tag(), Tag::PrintableString | Tag::Utf8String | Tag::Ia5String | Tag::TeletexString)
        .then(|| v.value())
}

/// A DN in strongSwan's notation, for messages and logs.
pub(crate) fn to_string(name: &Name) -> String {
    let mut out = String::new();
    for atv in name.0.iter().flat_map(|rdn| rdn.0.iter()) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        let oid = atv.oid.to_string();
        let key = ATTRIBUTES.iter().find(|(_, o, _)| *o == oid).map_or(oid.as_str(), |(k, _, _)| k);
        out.push_str(key);
        out.push('=');
        match string(&atv.value) {
            Some(s) => out.push_str(&String::from_utf8_lossy(s)),
            None => out.push_str("#..."),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_cert::der::Decode;

    #[test]
    fn strongswan_notation_round_trips_in_encoding_order() {
        let der = parse("C=CH, O=Cloister Test, CN=site-a.cloister.test").unwrap();
        let name = Name::from_der(&der).unwrap();
        assert_eq!(to_string(&name), "C=CH, O=Cloister Test, CN=site-a.cloister.test");
        let slashes =
            Name::from_der(&parse("/C=CH/O=Cloister Test/CN=site-a.cloister.test").unwrap()).unwrap();
        assert!(equal(&name, &slashes));
        let utf8 = Name::from_der(&parse("CN=Zürich, E=a@b.example").unwrap()).unwrap();
        assert_eq!(utf8.0[0].0.get(0).unwrap().value.tag(), Tag::Utf8String);
        assert_eq!(utf8.0[1].0.get(0).unwrap().value.tag(), Tag::Ia5String);
        assert_eq!(to_string(&utf8), "CN=Zürich, E=a@b.example");
        let escaped = Name::from_der(&parse(r"O=Example\, Inc., CN=x").unwrap()).unwrap();
        assert_eq!(escaped.0.len(), 2);
    }

    #[test]
    fn comparison_ignores_case_and_string_type_but_not_order() {
        let n = |s| Name::from_der(&parse(s).unwrap()).unwrap();
        assert!(equal(&n("C=CH, CN=Moon"), &n("c=ch, cn=moon")));
        assert!(equal(&n("CN=Zürich"), &n("CN=Zürich")));
        assert!(!equal(&n("C=CH, CN=moon"), &n("CN=moon, C=CH")));
        assert!(!equal(&n("C=CH, CN=moon"), &n("C=CH")));
        assert!(!equal(&n("CN=moon"), &n("O=moon")));
    }

    #[test]
    fn bad_dns_are_refused() {
        for bad in ["", "CN", "XX=y", "CN=", "C=Zürich", "CN=x\\", ", ,"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
