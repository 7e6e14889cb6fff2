//! The push-webhook parsers: any event name, body and signature header give an answer (a
//! delivery, a refusal, an error), never a panic; URL normalisation of whatever a payload names.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stacksync::runtime::webhook;

const EVENTS: [&str; 4] = ["push", "release", "ping", "workflow_run"];

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let event = EVENTS[usize::from(first) % EVENTS.len()];
    // The body, then (after a NUL) what the signature header says.
    let (body, signature) = match rest.iter().position(|b| *b == 0) {
        Some(i) => (&rest[..i], std::str::from_utf8(&rest[i + 1..]).ok()),
        None => (rest, None),
    };
    let _ = webhook::verify_signature(b"fuzz-secret", body, signature);
    let _ = webhook::token_matches(b"fuzz-token", body);
    let _ = webhook::parse_github(event, body);
    if let Ok(text) = std::str::from_utf8(body) {
        let _ = webhook::normalise_url(text);
    }
});
