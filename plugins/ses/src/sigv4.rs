//! AWS Signature Version 4 for a request with headers (no presigned URLs), written against the
//! published specification and its test suite.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// AWS credentials.
pub struct Credentials {
    /// The access key id (`AKIA…`).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

/// What to sign.
pub struct Signable<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The path, not yet encoded (`/v2/email/outbound-emails`).
    pub path: &'a str,
    /// Query parameters, not yet encoded.
    pub query: &'a [(&'a str, &'a str)],
    /// Every header that will be sent and signed, including `host` and `x-amz-date`.
    pub headers: &'a [(String, String)],
    /// The body.
    pub payload: &'a [u8],
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else { unreachable!("HMAC takes keys of any length") };
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Hex SHA-256.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// `kSigning`: HMAC chain over date (`YYYYMMDD`), region, service and `aws4_request`.
pub fn signing_key(secret: &str, date: &str, region: &str, service: &str) -> [u8; 32] {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

/// URI-encodes everything but the unreserved characters `A-Z a-z 0-9 - . _ ~`.
pub fn uri_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The canonical request and the signed-headers list.
pub fn canonical_request(req: &Signable<'_>) -> (String, String) {
    let path = if req.path.is_empty() { "/" } else { req.path };
    let canonical_uri = path.split('/').map(uri_encode).collect::<Vec<_>>().join("/");
    let mut query: Vec<(String, String)> = req.query.iter().map(|(k, v)| (uri_encode(k), uri_encode(v))).collect();
    query.sort();
    let canonical_query = query.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let mut headers: Vec<(String, String)> = Vec::new();
    for (name, value) in req.headers {
        let name = name.to_ascii_lowercase();
        let value = value.split_whitespace().collect::<Vec<_>>().join(" ");
        match headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push(',');
                v.push_str(&value);
            }
            None => headers.push((name, value)),
        }
    }
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    let canonical_headers: String = headers.iter().map(|(n, v)| format!("{n}:{v}\n")).collect();
    let signed_headers = headers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(";");
    let canonical = format!(
        "{}\n{canonical_uri}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{}",
        req.method,
        sha256_hex(req.payload)
    );
    (canonical, signed_headers)
}

/// The string to sign for `amz_date` (`YYYYMMDDTHHMMSSZ`) and the credential scope.
pub fn string_to_sign(canonical_request: &str, amz_date: &str, scope: &str) -> String {
    format!("AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}", sha256_hex(canonical_request.as_bytes()))
}

/// The `Authorization` header value for `req`, signed at `amz_date`.
pub fn authorization(req: &Signable<'_>, creds: &Credentials, region: &str, service: &str, amz_date: &str) -> String {
    let date = &amz_date[..amz_date.len().min(8)];
    let scope = format!("{date}/{region}/{service}/aws4_request");
    let (canonical, signed_headers) = canonical_request(req);
    let to_sign = string_to_sign(&canonical, amz_date, &scope);
    let signature =
        hex::encode(hmac(&signing_key(&creds.secret_access_key, date, region, service), to_sign.as_bytes()));
    format!(
        "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed_headers}, Signature={signature}",
        creds.access_key_id
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // The AWS Signature Version 4 test suite's credentials, region, service and date.
    const AMZ_DATE: &str = "20150830T123600Z";

    fn suite_creds() -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }

    fn suite_headers() -> Vec<(String, String)> {
        vec![("Host".into(), "example.amazonaws.com".into()), ("X-Amz-Date".into(), AMZ_DATE.into())]
    }

    #[test]
    fn derives_the_documented_signing_key() {
        // "Examples of how to derive a signing key for Signature Version 4" (IAM example).
        let key = signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam");
        assert_eq!(hex::encode(key), "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d");
    }

    #[test]
    fn get_vanilla() {
        let headers = suite_headers();
        let req = Signable { method: "GET", path: "/", query: &[], headers: &headers, payload: b"" };
        let (canonical, signed) = canonical_request(&req);
        assert_eq!(
            canonical,
            "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n\
             e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(signed, "host;x-amz-date");
        assert_eq!(
            string_to_sign(&canonical, AMZ_DATE, "20150830/us-east-1/service/aws4_request"),
            "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n\
             bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63"
        );
        assert_eq!(
            authorization(&req, &suite_creds(), "us-east-1", "service", AMZ_DATE),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        );
    }

    #[test]
    fn post_vanilla() {
        let headers = suite_headers();
        let req = Signable { method: "POST", path: "/", query: &[], headers: &headers, payload: b"" };
        assert!(
            authorization(&req, &suite_creds(), "us-east-1", "service", AMZ_DATE)
                .ends_with("Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b")
        );
    }

    #[test]
    fn get_vanilla_query_order_key_case() {
        let headers = suite_headers();
        let query = [("Param2", "value2"), ("Param1", "value1")];
        let req = Signable { method: "GET", path: "/", query: &query, headers: &headers, payload: b"" };
        assert!(canonical_request(&req).0.starts_with("GET\n/\nParam1=value1&Param2=value2\n"));
        assert!(
            authorization(&req, &suite_creds(), "us-east-1", "service", AMZ_DATE)
                .ends_with("Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
        );
    }

    #[test]
    fn get_utf8_path_is_encoded() {
        let headers = suite_headers();
        let req = Signable { method: "GET", path: "/\u{1234}", query: &[], headers: &headers, payload: b"" };
        assert!(canonical_request(&req).0.starts_with("GET\n/%E1%88%B4\n"));
    }

    #[test]
    fn header_values_are_trimmed_and_folded() {
        let headers = vec![
            ("My-Header1".to_owned(), "  value1   with  spaces ".to_owned()),
            ("my-header1".to_owned(), "value2".to_owned()),
            ("Host".to_owned(), "h".to_owned()),
        ];
        let req = Signable { method: "GET", path: "/", query: &[], headers: &headers, payload: b"" };
        let (canonical, signed) = canonical_request(&req);
        assert!(canonical.contains("host:h\nmy-header1:value1 with spaces,value2\n"), "{canonical}");
        assert_eq!(signed, "host;my-header1");
    }
}
