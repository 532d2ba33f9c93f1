use super::*;
use crate::entropy::hex;
use crate::inbound::ProviderSecretError;

const NOW_S: u64 = 1_800_000_000;
const BODY: &[u8] = br#"{"id":"evt_1","type":"invoice.paid"}"#;

fn secret(scheme: &Scheme, text: &str) -> ProviderSecret {
    ProviderSecret::parse(scheme, text).expect("valid secret")
}

fn check(
    scheme: &Scheme,
    secrets: &[&ProviderSecret],
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<(), SignatureError> {
    verify(scheme, secrets, |name| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str()), body, NOW_S)
}

fn stripe_header(key: &str, t: u64, body: &[u8]) -> String {
    format!("t={t},v1={}", hex(&mac_of(key.as_bytes(), format!("{t}.").as_bytes(), body)))
}

#[test]
fn stripe_accepts_its_signature_and_refuses_forged_expired_and_malformed_ones() {
    let scheme = Scheme::Stripe;
    let key = secret(&scheme, "whsec_stripe_test_secret");
    let ok = stripe_header("whsec_stripe_test_secret", NOW_S - 10, BODY);
    assert_eq!(check(&scheme, &[&key], &[("stripe-signature", ok.clone())], BODY), Ok(()));
    assert_eq!(check(&scheme, &[&key], &[("stripe-signature", ok)], b"{}"), Err(SignatureError::NoMatch));
    let forged = stripe_header("another-secret-entirely", NOW_S, BODY);
    assert_eq!(check(&scheme, &[&key], &[("stripe-signature", forged)], BODY), Err(SignatureError::NoMatch));
    let old = stripe_header("whsec_stripe_test_secret", NOW_S - TIMESTAMP_TOLERANCE_S - 1, BODY);
    assert_eq!(check(&scheme, &[&key], &[("stripe-signature", old)], BODY), Err(SignatureError::Expired));
    for bad in ["v1=00", "t=abc,v1=00", "t=1", ""] {
        let answer = check(&scheme, &[&key], &[("stripe-signature", bad.into())], BODY);
        assert_eq!(answer, Err(SignatureError::Malformed("stripe-signature".into())), "{bad}");
    }
    assert_eq!(check(&scheme, &[&key], &[], BODY), Err(SignatureError::MissingHeader("stripe-signature".into())));
}

#[test]
fn stripe_accepts_any_of_several_v1_signatures_as_during_its_rotation() {
    let scheme = Scheme::Stripe;
    let key = secret(&scheme, "whsec_new_secret_value");
    let other = hex(&mac_of(b"old-secret-value", format!("{NOW_S}.").as_bytes(), BODY));
    let mine = hex(&mac_of(b"whsec_new_secret_value", format!("{NOW_S}.").as_bytes(), BODY));
    let header = format!("t={NOW_S},v1={other},v0=ignored,v1={mine}");
    assert_eq!(check(&scheme, &[&key], &[("stripe-signature", header)], BODY), Ok(()));
}

#[test]
fn github_accepts_its_signature_under_the_current_or_a_rotated_secret() {
    let scheme = Scheme::Github;
    let (new, old) = (secret(&scheme, "new github secret"), secret(&scheme, "old github secret"));
    let header = format!("sha256={}", hex(&mac_of(b"old github secret", b"", BODY)));
    let headers = [("x-hub-signature-256", header)];
    assert_eq!(check(&scheme, &[&new, &old], &headers, BODY), Ok(()));
    assert_eq!(check(&scheme, &[&new], &headers, BODY), Err(SignatureError::NoMatch));
    let bare = [("x-hub-signature-256", hex(&mac_of(b"new github secret", b"", BODY)))];
    assert_eq!(check(&scheme, &[&new], &bare, BODY), Err(SignatureError::Malformed("x-hub-signature-256".into())));
}

#[test]
fn plain_hmac_reads_its_header_prefix_and_encoding() {
    let scheme = Scheme::HmacSha256 { header: "x-shop-hmac".into(), encoding: Encoding::Base64, prefix: None };
    let key = secret(&scheme, "shop-secret-123");
    let tag = BASE64.encode(mac_of(b"shop-secret-123", b"", BODY));
    assert_eq!(check(&scheme, &[&key], &[("x-shop-hmac", tag.clone())], BODY), Ok(()));
    assert_eq!(check(&scheme, &[&key], &[("x-shop-hmac", tag)], b"[]"), Err(SignatureError::NoMatch));
    let hex_scheme =
        Scheme::HmacSha256 { header: "x-signature".into(), encoding: Encoding::Hex, prefix: Some("sha256=".into()) };
    let tag = format!("sha256={}", hex(&mac_of(b"shop-secret-123", b"", BODY)).to_uppercase());
    assert_eq!(check(&hex_scheme, &[&key], &[("x-signature", tag)], BODY), Ok(()));
}

#[test]
fn standard_webhooks_verifies_with_the_whsec_key_and_its_tolerance() {
    let scheme = Scheme::StandardWebhooks;
    let text = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let key = secret(&scheme, text);
    let signing_key = signing::Secret::parse(text).expect("whsec");
    let headers = |ts: u64| {
        [
            ("webhook-id", "msg_1".to_string()),
            ("webhook-timestamp", ts.to_string()),
            ("webhook-signature", signing::sign(&signing_key, "msg_1", ts, BODY)),
        ]
    };
    assert_eq!(check(&scheme, &[&key], &headers(NOW_S), BODY), Ok(()));
    assert_eq!(check(&scheme, &[&key], &headers(NOW_S - 3_600), BODY), Err(SignatureError::Expired));
    assert_eq!(
        check(&scheme, &[&key], &headers(NOW_S)[..2], BODY),
        Err(SignatureError::MissingHeader("webhook-signature".into()))
    );
}

#[test]
fn secrets_are_checked_for_their_scheme_and_never_shown() {
    assert_eq!(ProviderSecret::parse(&Scheme::Github, "short"), Err(ProviderSecretError::BadLength(5)));
    assert_eq!(ProviderSecret::parse(&Scheme::StandardWebhooks, "not-a-whsec"), Err(ProviderSecretError::NotWhsec));
    let key = secret(&Scheme::Github, "do-not-print-me");
    assert!(!format!("{key:?}").contains("print"));
}
