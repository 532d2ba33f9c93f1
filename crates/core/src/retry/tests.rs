use super::retry_after::parse_http_date_ms;
use super::*;
use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;

fn rng() -> StdRng {
    StdRng::seed_from_u64(7)
}

fn status(code: u16) -> AttemptResult {
    AttemptResult::Status { code, retry_after_ms: None }
}

const HOUR_MS: u64 = 3600 * 1000;

#[test]
fn default_policy_has_design_values_and_is_valid() {
    let policy = RetryPolicy::default();
    assert_eq!(policy.attempts_max, 18);
    assert_eq!(policy.base_ms, 5_000);
    assert_eq!(policy.cap_ms, 8 * HOUR_MS);
    assert_eq!(policy.max_age_s, 72 * 3600);
    assert_eq!(policy.retry_after_max_ms, HOUR_MS);
    assert_eq!(policy.validate(), Ok(()));
}

#[test]
fn validate_names_the_field_to_fix() {
    let ok = RetryPolicy::default();
    let cases = [
        (RetryPolicy { attempts_max: 0, ..ok }, "retry.attempts_max must be between 1 and 100"),
        (RetryPolicy { attempts_max: 101, ..ok }, "retry.attempts_max must be between 1 and 100"),
        (RetryPolicy { base_ms: 0, ..ok }, "retry.base_ms"),
        (RetryPolicy { base_ms: ok.cap_ms + 1, ..ok }, "retry.base_ms"),
        (RetryPolicy { cap_ms: CAP_MS_LIMIT + 1, ..ok }, "retry.cap_ms"),
        (RetryPolicy { max_age_s: 0, ..ok }, "retry.max_age_s"),
        (RetryPolicy { max_age_s: MAX_AGE_S_LIMIT + 1, ..ok }, "retry.max_age_s"),
        (
            RetryPolicy { retry_after_max_ms: RETRY_AFTER_MAX_MS_LIMIT + 1, ..ok },
            "retry.retry_after_max_ms must be between 0 and 604800000 (7 days)",
        ),
    ];
    for (policy, expected) in cases {
        let error = policy.validate().expect_err("invalid policy");
        assert!(error.starts_with(expected), "{error:?} should start with {expected:?}");
    }
    let edges = RetryPolicy {
        attempts_max: 100,
        base_ms: 1,
        cap_ms: CAP_MS_LIMIT,
        max_age_s: MAX_AGE_S_LIMIT,
        retry_after_max_ms: RETRY_AFTER_MAX_MS_LIMIT,
    };
    assert_eq!(edges.validate(), Ok(()));
    let small = RetryPolicy { attempts_max: 1, base_ms: 10, cap_ms: 10, max_age_s: 1, retry_after_max_ms: 0 };
    assert_eq!(small.validate(), Ok(()));
}

#[test]
fn ceiling_doubles_per_attempt_then_stays_at_cap() {
    let policy = RetryPolicy::default();
    let expected = [5_000, 10_000, 20_000, 40_000, 80_000, 160_000, 320_000, 640_000];
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(policy.backoff_ceiling_ms(i as u32 + 1), *want, "attempt {}", i + 1);
    }
    // 5 s * 2^12 = 20480 s is still under 8 h = 28800 s; 2^13 crosses it.
    assert_eq!(policy.backoff_ceiling_ms(13), 20_480_000);
    assert_eq!(policy.backoff_ceiling_ms(14), 8 * HOUR_MS);
    assert_eq!(policy.backoff_ceiling_ms(100), 8 * HOUR_MS);
    assert_eq!(policy.backoff_ceiling_ms(u32::MAX), 8 * HOUR_MS);
    assert_eq!(policy.backoff_ceiling_ms(0), 5_000);
}

#[test]
fn ceiling_saturates_instead_of_overflowing() {
    let policy = RetryPolicy { attempts_max: 1, base_ms: u64::MAX / 3, cap_ms: u64::MAX, ..RetryPolicy::default() };
    assert_eq!(policy.backoff_ceiling_ms(2), (u64::MAX / 3) * 2);
    assert_eq!(policy.backoff_ceiling_ms(3), u64::MAX);
    assert_eq!(policy.backoff_ceiling_ms(65), u64::MAX);
    let _ = policy.backoff_ms(u32::MAX, &mut rng());
    assert_eq!(policy.throttled_ms(u32::MAX, &mut rng()), u64::MAX);
}

#[test]
fn jitter_spreads_over_the_whole_range() {
    let policy = RetryPolicy { base_ms: 100, ..RetryPolicy::default() };
    let mut rng = rng();
    let draws: Vec<u64> = (0..2_000).map(|_| policy.backoff_ms(1, &mut rng)).collect();
    assert!(draws.iter().all(|&d| d <= 100));
    assert!(draws.iter().any(|&d| d < 10), "low end reached");
    assert!(draws.iter().any(|&d| d > 90), "high end reached");
}

#[test]
fn status_2xx_is_delivered() {
    for code in [200, 201, 204, 299] {
        let decision = decide(&RetryPolicy::default(), &status(code), 1, 0, 0, &mut rng());
        assert_eq!(decision, Decision::Delivered, "status {code}");
    }
}

#[test]
fn status_410_is_gone_even_on_the_last_attempt() {
    let policy = RetryPolicy::default();
    assert_eq!(decide(&policy, &status(410), 1, 0, 0, &mut rng()), Decision::Gone);
    assert_eq!(decide(&policy, &status(410), policy.attempts_max, 0, 0, &mut rng()), Decision::Gone);
}

#[test]
fn other_statuses_and_failures_are_retried_within_the_backoff() {
    let policy = RetryPolicy::default();
    let now = 1_000_000;
    for result in [status(500), status(503), status(404), status(301), status(100), AttemptResult::Failed] {
        match decide(&policy, &result, 3, now, now, &mut rng()) {
            Decision::Retry { at_ms, rule: RetryRule::Backoff } => {
                assert!((now..=now + 20_000).contains(&at_ms), "{result:?}")
            }
            other => panic!("{result:?} gave {other:?}"),
        }
    }
}

#[test]
fn a_retry_is_never_due_in_the_millisecond_its_attempt_ended() {
    // A ceiling of 1 ms draws a delay of 0 about half the time.
    let policy = RetryPolicy { attempts_max: 100, base_ms: 1, cap_ms: 1, max_age_s: 60, retry_after_max_ms: 0 };
    let mut draws = rng();
    assert!((0..64).any(|_| policy.backoff_ms(0, &mut draws) == 0), "the test must draw a zero delay");
    let now = 5_000;
    let mut jitter = rng();
    for result in [status(500), AttemptResult::Status { code: 503, retry_after_ms: Some(0) }, AttemptResult::Failed] {
        for _ in 0..64 {
            let decision = decide(&policy, &result, 1, now, now, &mut jitter);
            assert_eq!(decision.retry_at_ms(), Some(now + 1));
        }
    }
}

#[test]
fn failure_at_exactly_attempts_max_is_dead() {
    let policy = RetryPolicy { attempts_max: 3, ..RetryPolicy::default() };
    assert!(matches!(decide(&policy, &status(500), 2, 0, 0, &mut rng()), Decision::Retry { .. }));
    let decision = decide(&policy, &status(500), 3, 0, 0, &mut rng());
    assert_eq!(decision, Decision::Dead { reason: "attempts exhausted: 3 of 3 failed".into() });
    assert!(matches!(decide(&policy, &AttemptResult::Failed, 4, 0, 0, &mut rng()), Decision::Dead { .. }));
}

#[test]
fn retry_past_the_max_age_is_dead() {
    let policy = RetryPolicy { base_ms: 10_000, cap_ms: 10_000, max_age_s: 60, ..RetryPolicy::default() };
    let start = 5_000_000;
    // Retry-After pins the delay to exactly 10 s, so the deadline edge is exact.
    let forced = AttemptResult::Status { code: 503, retry_after_ms: Some(10_000) };
    let at_limit = decide(&policy, &forced, 1, start, start + 50_000, &mut rng());
    assert_eq!(at_limit.retry_at_ms(), Some(start + 60_000));
    match decide(&policy, &forced, 1, start, start + 50_001, &mut rng()) {
        Decision::Dead { reason } => assert!(reason.starts_with("max age exceeded: "), "{reason}"),
        other => panic!("expected dead, got {other:?}"),
    }
}

fn retry_after(code: u16, ms: u64) -> AttemptResult {
    AttemptResult::Status { code, retry_after_ms: Some(ms) }
}

#[test]
fn retry_after_is_a_floor_even_past_cap_ms() {
    let policy = RetryPolicy { cap_ms: 60_000, base_ms: 1_000, ..RetryPolicy::default() };
    let decision = decide(&policy, &retry_after(503, 600_000), 1, 0, 1_000, &mut rng());
    assert_eq!(decision, Decision::Retry { at_ms: 601_000, rule: RetryRule::RetryAfter });
}

#[test]
fn retry_after_over_its_maximum_waits_the_maximum_and_says_so() {
    let policy = RetryPolicy::default();
    let decision = decide(&policy, &retry_after(503, 10 * HOUR_MS), 1, 0, 0, &mut rng());
    assert_eq!(decision, Decision::Retry { at_ms: HOUR_MS, rule: RetryRule::RetryAfterCapped });
    // A huge value (an overflowing delta saturates to u64::MAX) is the same.
    let huge = decide(&policy, &retry_after(429, u64::MAX), 1, 0, 0, &mut rng());
    assert_eq!(huge, Decision::Retry { at_ms: HOUR_MS, rule: RetryRule::RetryAfterCapped });
}

#[test]
fn retry_after_shorter_than_the_backoff_keeps_the_backoff() {
    let policy = RetryPolicy { base_ms: 1_000_000, cap_ms: 1_000_000, ..RetryPolicy::default() };
    let plain = decide(&policy, &status(503), 1, 0, 0, &mut rng());
    assert!(matches!(plain, Decision::Retry { rule: RetryRule::Backoff, .. }), "{plain:?}");
    assert_eq!(decide(&policy, &retry_after(503, 0), 1, 0, 0, &mut rng()), plain);
    assert_eq!(decide(&policy, &retry_after(503, 1_000), 1, 0, 0, &mut rng()), plain);
}

#[test]
fn retry_after_zero_on_a_429_is_the_plain_backoff_not_the_throttled_one() {
    let policy = RetryPolicy::default();
    let plain = decide(&policy, &status(503), 1, 0, 0, &mut rng());
    assert_eq!(decide(&policy, &retry_after(429, 0), 1, 0, 0, &mut rng()), plain);
}

#[test]
fn a_429_with_retry_after_waits_what_it_asked() {
    let policy = RetryPolicy::default();
    let decision = decide(&policy, &retry_after(429, 120_000), 1, 0, 1_000, &mut rng());
    assert_eq!(decision, Decision::Retry { at_ms: 121_000, rule: RetryRule::RetryAfter });
}

#[test]
fn a_429_without_retry_after_is_throttled_from_the_backoff_ceiling_up() {
    let policy = RetryPolicy::default();
    let mut rng = rng();
    for _ in 0..200 {
        match decide(&policy, &status(429), 1, 0, 0, &mut rng) {
            Decision::Retry { at_ms, rule: RetryRule::Throttled } => {
                assert!((5_000..=10_000).contains(&at_ms), "{at_ms}")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn throttled_waits_lie_above_every_5xx_wait_of_the_same_attempt() {
    // The definition: on attempt n, every throttled wait is at least the
    // backoff ceiling c(n), which bounds every 5xx wait; its mean is
    // strictly higher (below the cap by half a range or more, at the cap
    // it is the cap itself against a 5xx mean of about half of it).
    let policy = RetryPolicy::default();
    for attempts_made in 1..=policy.attempts_max {
        let ceiling = policy.backoff_ceiling_ms(attempts_made);
        let (mut throttled, mut server) = (StdRng::seed_from_u64(41), StdRng::seed_from_u64(41));
        let mut throttled_sum = 0u128;
        let mut server_sum = 0u128;
        for _ in 0..256 {
            let (t, t_rule) = choose_wait(&policy, Some(429), None, attempts_made, &mut throttled);
            let (s, s_rule) = choose_wait(&policy, Some(503), None, attempts_made, &mut server);
            assert_eq!((t_rule, s_rule), (RetryRule::Throttled, RetryRule::Backoff));
            assert!(s <= ceiling && ceiling <= t, "attempt {attempts_made}: 5xx {s}, ceiling {ceiling}, 429 {t}");
            assert!(t <= policy.cap_ms);
            throttled_sum += u128::from(t);
            server_sum += u128::from(s);
        }
        assert!(throttled_sum > server_sum, "attempt {attempts_made}");
        if ceiling < policy.cap_ms {
            assert!(throttled_sum >= server_sum * 2, "attempt {attempts_made}: not harder enough");
        }
    }
}

#[test]
fn a_failure_to_get_an_answer_is_the_plain_backoff() {
    let policy = RetryPolicy::default();
    let failed = decide(&policy, &AttemptResult::Failed, 2, 0, 0, &mut rng());
    let server = decide(&policy, &status(500), 2, 0, 0, &mut rng());
    assert_eq!(failed, server);
    assert!(matches!(failed, Decision::Retry { rule: RetryRule::Backoff, .. }));
}

#[test]
fn retry_after_max_ms_of_zero_ignores_the_header() {
    let policy = RetryPolicy { retry_after_max_ms: 0, ..RetryPolicy::default() };
    let plain = decide(&policy, &status(503), 1, 0, 0, &mut rng());
    assert_eq!(decide(&policy, &retry_after(503, 10 * HOUR_MS), 1, 0, 0, &mut rng()), plain);
}

#[test]
fn retry_after_past_the_max_age_dead_letters_and_says_the_receiver_asked() {
    let policy = RetryPolicy { max_age_s: 600, ..RetryPolicy::default() };
    match decide(&policy, &retry_after(503, 1_200_000), 1, 0, 1_000, &mut rng()) {
        Decision::Dead { reason } => assert_eq!(
            reason,
            "max age exceeded: the receiver asked to wait 1200 s (Retry-After), so the next attempt \
             would start 1201 s into the cycle, the limit is 600 s"
        ),
        other => panic!("{other:?}"),
    }
    let capped = RetryPolicy { max_age_s: 1_800, ..RetryPolicy::default() };
    match decide(&capped, &retry_after(429, 2 * HOUR_MS), 1, 0, 0, &mut rng()) {
        Decision::Dead { reason } => assert_eq!(
            reason,
            "max age exceeded: the receiver asked to wait 7200 s (Retry-After, honoured up to 3600 s), \
             so the next attempt would start 3600 s into the cycle, the limit is 1800 s"
        ),
        other => panic!("{other:?}"),
    }
    // Inside the age bound the same answer is a retry at the floor.
    let roomy = RetryPolicy { max_age_s: 1_201, ..RetryPolicy::default() };
    let decision = decide(&roomy, &retry_after(503, 1_200_000), 1, 0, 1_000, &mut rng());
    assert_eq!(decision, Decision::Retry { at_ms: 1_201_000, rule: RetryRule::RetryAfter });
}

#[test]
fn an_http_date_retry_after_is_a_floor_too() {
    let date_ms = 1_445_412_480_000; // Wed, 21 Oct 2015 07:28:00 GMT
    let policy = RetryPolicy::default();
    let asked = |now_ms| AttemptResult::Status {
        code: 503,
        retry_after_ms: parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now_ms),
    };
    let now = date_ms - 30 * 60_000;
    let decision = decide(&policy, &asked(now), 1, now, now, &mut rng());
    assert_eq!(decision, Decision::Retry { at_ms: date_ms, rule: RetryRule::RetryAfter });
    let early = date_ms - 2 * HOUR_MS;
    let decision = decide(&policy, &asked(early), 1, early, early, &mut rng());
    assert_eq!(decision, Decision::Retry { at_ms: early + HOUR_MS, rule: RetryRule::RetryAfterCapped });
    // A date already past asks for no wait: the backoff decides.
    let late = date_ms + 60_000;
    let decision = decide(&policy, &asked(late), 1, late, late, &mut rng());
    assert_eq!(decision, decide(&policy, &status(503), 1, late, late, &mut rng()));
}

#[test]
fn rules_have_their_api_names() {
    let names = [RetryRule::Backoff, RetryRule::RetryAfter, RetryRule::RetryAfterCapped, RetryRule::Throttled]
        .map(RetryRule::as_str);
    assert_eq!(names, ["backoff", "retry_after", "retry_after_capped", "throttled"]);
}

fn bincode_of<T: Serialize>(value: &T) -> Vec<u8> {
    bincode::serde::encode_to_vec(value, bincode::config::standard()).expect("encodes")
}

fn from_bincode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bincode::serde::decode_from_slice(bytes, bincode::config::standard()) {
        Ok((value, read)) if read == bytes.len() => Ok(value),
        Ok((_, read)) => Err(format!("{} trailing bytes", bytes.len() - read)),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn a_policy_round_trips_and_a_truncated_one_is_refused() {
    let policy = RetryPolicy { retry_after_max_ms: 42, ..RetryPolicy::default() };
    let bytes = bincode_of(&policy);
    assert_eq!(from_bincode::<RetryPolicy>(&bytes), Ok(policy));
    let json = serde_json::to_string(&policy).expect("encodes");
    assert_eq!(serde_json::from_str::<RetryPolicy>(&json).expect("decodes"), policy);
    assert!(from_bincode::<RetryPolicy>(&bytes[..bytes.len() - 1]).is_err(), "truncated");
}

#[test]
fn a_decision_round_trips_and_names_when_it_retries() {
    let decision = Decision::Retry { at_ms: 9_000, rule: RetryRule::Throttled };
    assert_eq!(from_bincode::<Decision>(&bincode_of(&decision)), Ok(decision.clone()));
    assert_eq!(decision.retry_at_ms(), Some(9_000));
    assert_eq!(Decision::Deferred { at_ms: 8 }.retry_at_ms(), Some(8));
    assert_eq!(Decision::Gone.retry_at_ms(), None);
}

#[test]
fn decisions_are_deterministic_for_a_seeded_rng() {
    let policy = RetryPolicy::default();
    let run = |seed| {
        let mut rng = StdRng::seed_from_u64(seed);
        (1..18).map(|n| decide(&policy, &status(500), n, 0, n as u64 * 1000, &mut rng)).collect::<Vec<_>>()
    };
    assert_eq!(run(11), run(11));
    assert_ne!(run(11), run(12));
}

#[test]
fn retry_after_parses_delta_seconds() {
    assert_eq!(parse_retry_after("120", 0), Some(120_000));
    assert_eq!(parse_retry_after("  0 ", 0), Some(0));
    assert_eq!(parse_retry_after("99999999999999999999", 0), None);
    assert_eq!(parse_retry_after("18446744073709552", 0), Some(u64::MAX));
}

#[test]
fn retry_after_parses_an_imf_fixdate() {
    let date_ms = 1_445_412_480_000; // 2015-10-21T07:28:00Z
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date_ms - 30_000), Some(30_000));
    assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", date_ms + 5_000), Some(0));
    assert_eq!(parse_http_date_ms("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
    assert_eq!(parse_http_date_ms("Tue, 29 Feb 2000 23:59:59 GMT"), Some(951_868_799_000));
    // Before the epoch there is no delay to give: the hint is ignored.
    assert_eq!(parse_http_date_ms("Wed, 31 Dec 1969 23:59:59 GMT"), None);
}

/// RFC 9110 §5.6.7: a recipient accepts the two obsolete forms as well.
#[test]
fn retry_after_accepts_the_obsolete_http_date_forms() {
    let date_ms = 1_445_412_480_000; // 2015-10-21T07:28:00Z
    for text in ["Wednesday, 21-Oct-15 07:28:00 GMT", "Wed Oct 21 07:28:00 2015"] {
        assert_eq!(parse_retry_after(text, date_ms - 30_000), Some(30_000), "{text:?}");
    }
}

#[test]
fn retry_after_garbage_is_none() {
    for text in [
        "",
        "soon",
        "-5",
        "1.5",
        "+5",
        "Wed, 21 Oct 2015 07:28:00 UTC",
        "Wed, 21 Oct 2015 07:28 GMT",
        "Wed, 21 Foo 2015 07:28:00 GMT",
        "Wed, 32 Oct 2015 07:28:00 GMT",
        "Mon, 29 Feb 2100 00:00:00 GMT",
        "Wed, 21 Oct 2015 24:00:00 GMT",
        "Wed 21 Oct 2015 07:28:00 GMT",
    ] {
        assert_eq!(parse_retry_after(text, 0), None, "{text:?}");
    }
}

proptest! {
    #[test]
    fn backoff_is_always_within_zero_and_the_ceiling(
        base_ms in 1u64..=CAP_MS_LIMIT,
        cap_extra in 0u64..=CAP_MS_LIMIT,
        attempts_made in any::<u32>(),
        seed in any::<u64>(),
    ) {
        let policy = RetryPolicy { base_ms, cap_ms: base_ms.saturating_add(cap_extra), ..RetryPolicy::default() };
        let ceiling = policy.backoff_ceiling_ms(attempts_made);
        prop_assert!(ceiling <= policy.cap_ms);
        prop_assert!(ceiling >= base_ms.min(policy.cap_ms));
        let delay = policy.backoff_ms(attempts_made, &mut StdRng::seed_from_u64(seed));
        prop_assert!(delay <= ceiling);
    }

    #[test]
    fn retry_is_never_past_the_age_bound_nor_before_now(
        attempts_made in 1u32..ATTEMPTS_MAX_LIMIT,
        started in 0u64..1_000_000_000,
        elapsed in 0u64..(80 * HOUR_MS),
        retry_after_ms in proptest::option::of(0u64..(20 * HOUR_MS)),
        code in 300u16..600,
        seed in any::<u64>(),
    ) {
        let policy = RetryPolicy::default();
        let now = started + elapsed;
        let result = AttemptResult::Status { code, retry_after_ms };
        let decision = decide(&policy, &result, attempts_made, started, now, &mut StdRng::seed_from_u64(seed));
        match decision {
            Decision::Retry { at_ms, rule } => {
                prop_assert!(at_ms > now && at_ms <= now + policy.cap_ms.max(policy.retry_after_max_ms));
                prop_assert!(at_ms <= started + policy.max_age_s * 1000);
                prop_assert!(attempts_made < policy.attempts_max);
                // Retry-After is a floor, up to its maximum.
                if let Some(asked) = retry_after_ms {
                    prop_assert!(at_ms >= now + asked.min(policy.retry_after_max_ms));
                }
                let expected_rules: &[RetryRule] = match retry_after_ms {
                    None if code == 429 => &[RetryRule::Throttled],
                    None => &[RetryRule::Backoff],
                    Some(asked) if asked > policy.retry_after_max_ms => {
                        &[RetryRule::RetryAfterCapped, RetryRule::Backoff]
                    }
                    Some(_) => &[RetryRule::RetryAfter, RetryRule::Backoff],
                };
                prop_assert!(expected_rules.contains(&rule), "{rule:?}");
            }
            Decision::Deferred { .. } => prop_assert!(false, "decide deferred a delivery that was sent"),
            Decision::IgnoredStale { .. } => prop_assert!(false, "decide ignored a delivery that was sent"),
            Decision::Dead { .. } => {}
            Decision::Gone => prop_assert_eq!(code, 410),
            Decision::Delivered => prop_assert!(false, "non-2xx delivered"),
        }
    }

    #[test]
    fn delta_seconds_round_trip(seconds in 0u64..=u64::MAX / 1000) {
        prop_assert_eq!(parse_retry_after(&seconds.to_string(), 0), Some(seconds * 1000));
    }

    #[test]
    fn any_retry_after_text_is_a_delay_only_in_one_of_the_two_forms(
        text in "\\PC{0,40}|[0-9 ]{0,30}|[A-Za-z]{3}, [0-9]{2} [A-Za-z]{3} [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT",
        now_ms in any::<u64>(),
    ) {
        if let Some(delay_ms) = parse_retry_after(&text, now_ms) {
            let value = text.trim();
            let digits = !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit());
            prop_assert!(digits || parse_http_date_ms(value).is_some(), "{text:?} gave {delay_ms}");
            if let Some(date_ms) = parse_http_date_ms(value) {
                prop_assert_eq!(delay_ms, date_ms.saturating_sub(now_ms));
            }
        }
    }

    #[test]
    fn any_http_date_of_a_real_time_is_that_time(seconds in 0u64..253_402_300_800) {
        let text = httpdate::fmt_http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds));
        prop_assert_eq!(parse_retry_after(&text, 0), Some(seconds * 1000), "{}", text);
    }
}

#[test]
fn a_deferral_waits_at_least_a_second_grows_with_the_attempts_and_never_dead_letters() {
    let policy = RetryPolicy::default();
    let mut rng = StdRng::seed_from_u64(8);
    for attempts in [1, 5, 50, 10_000] {
        for _ in 0..50 {
            let Decision::Deferred { at_ms } = defer(&policy, attempts, 1_000_000, &mut rng) else {
                panic!("a deferral")
            };
            let wait = at_ms - 1_000_000;
            assert!(wait >= DEFER_MIN_MS, "{wait}");
            assert!(wait <= policy.backoff_ceiling_ms(attempts).max(DEFER_MIN_MS), "{wait}");
        }
    }
}
