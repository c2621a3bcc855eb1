//! The wire protocol and the daemon's session loop fed arbitrary input: decoding never panics and
//! answers every payload with a message or an error; what encodes decodes to itself; and a daemon
//! that read any bytes from a rogue connection still serves a well-behaved process. Bounded in
//! cases (PROPTEST_CASES raises them).

mod common;

use common::*;
use gpushare::protocol::{
    frame_len, status_replies, DeviceId, Reply, Request, StatusReader, MAX_FRAME, MAX_NAME,
    PROTOCOL_VERSION,
};
use proptest::prelude::*;
use std::io::Write;
use std::time::Duration;

fn device() -> impl Strategy<Value = DeviceId> {
    any::<[u8; 16]>().prop_map(DeviceId)
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            "[a-z0-9._-]{0,40}",
            proptest::collection::vec((device(), any::<u64>()), 0..4)
        )
            .prop_map(|(client, reserved)| Request::Hello {
                version: PROTOCOL_VERSION,
                client,
                reserved,
            }),
        device().prop_map(|device| Request::Acquire { device }),
        (device(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(device, busy_ns, launches, active_ns)| {
                Request::Release {
                    device,
                    busy_ns,
                    launches,
                    active_ns,
                }
            }
        ),
        (device(), any::<u64>()).prop_map(|(device, bytes)| Request::Reserve { device, bytes }),
        (device(), any::<u64>()).prop_map(|(device, bytes)| Request::Unreserve { device, bytes }),
        (device(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(device, busy_ns, launches, active_ns)| {
                Request::Renew {
                    device,
                    busy_ns,
                    launches,
                    active_ns,
                }
            }
        ),
        (device(), any::<u64>(), any::<u64>()).prop_map(|(device, launches, active_ns)| {
            Request::Extend {
                device,
                launches,
                active_ns,
            }
        }),
        any::<u64>().prop_map(|session| Request::Watch { session }),
        (any::<u64>(), device()).prop_map(|(session, device)| Request::Lane { session, device }),
        Just(Request::Status),
        (any::<u64>(), "[a-z]{0,10}")
            .prop_map(|(since_seconds, by)| Request::Usage { since_seconds, by }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn decoding_arbitrary_payloads_never_panics(payload in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = Request::decode(&payload);
        let _ = Reply::decode(&payload);
    }

    #[test]
    fn every_request_round_trips(r in request()) {
        let frame = r.to_frame().unwrap();
        let n = frame_len(frame[..4].try_into().unwrap()).unwrap();
        prop_assert_eq!(n, frame.len() - 4);
        prop_assert_eq!(Request::decode(&frame[4..]).unwrap(), r);
    }

    #[test]
    fn truncated_and_extended_requests_are_refused(r in request(), cut in 1usize..8, extra in 1u8..=255) {
        let frame = r.to_frame().unwrap();
        let payload = &frame[4..];
        if payload.len() > cut {
            prop_assert!(Request::decode(&payload[..payload.len() - cut]).is_err());
        }
        let mut longer = payload.to_vec();
        longer.push(extra);
        prop_assert!(Request::decode(&longer).is_err());
    }

    #[test]
    fn status_documents_of_any_length_travel_in_bounded_frames(
        doc in proptest::collection::vec(any::<u8>(), 0..20_000)
    ) {
        let mut reader = StatusReader::default();
        let mut whole = None;
        for reply in status_replies(&doc) {
            prop_assert!(whole.is_none(), "a piece after the last");
            let frame = reply.to_frame().unwrap();
            let n = frame_len(frame[..4].try_into().unwrap()).unwrap();
            prop_assert!(n <= MAX_FRAME);
            whole = reader.push(Reply::decode(&frame[4..]).unwrap()).unwrap();
        }
        prop_assert_eq!(whole, Some(doc));
    }

    #[test]
    fn a_status_reader_fed_arbitrary_payloads_never_panics(
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16)
    ) {
        let mut reader = StatusReader::default();
        for p in payloads {
            if let Ok(reply) = Reply::decode(&p) {
                let _ = reader.push(reply);
            }
        }
    }

    #[test]
    fn frame_headers_are_bounded(header in any::<[u8; 4]>()) {
        if let Ok(n) = frame_len(header) {
            prop_assert!(n <= MAX_FRAME);
        }
    }
}

#[test]
fn long_client_names_are_refused() {
    let r = Request::Hello {
        version: 1,
        client: "x".repeat(MAX_NAME + 1),
        reserved: vec![],
    };
    if let Ok(frame) = r.to_frame() {
        assert!(Request::decode(&frame[4..]).is_err());
    }
}

/// Rogue connections write random frames (valid headers with random payloads, valid requests
/// out of order, and raw bytes) to the real daemon; afterwards it still attaches and grants a
/// well-behaved process, and it is still running.
#[test]
fn the_session_loop_survives_arbitrary_frames() {
    let d = Daemon::start("[clients.a]\nrequest = 0.5\nusers = [\"*\"]\n", None);
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 150,
        ..ProptestConfig::default()
    });
    let frames = proptest::collection::vec(
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|p| {
                let mut f = (p.len() as u32).to_le_bytes().to_vec();
                f.extend(p);
                f
            }),
            request().prop_map(|r| r.to_frame().unwrap()),
            proptest::collection::vec(any::<u8>(), 0..16),
        ],
        1..12,
    );
    runner
        .run(&frames, |frames| {
            let mut c = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
            c.set_write_timeout(Some(Duration::from_secs(2))).unwrap();
            for f in &frames {
                if c.write_all(f).is_err() {
                    break; // the daemon closed this connection: fine
                }
            }
            Ok(())
        })
        .unwrap();
    let mut good = d.connect();
    assert!(
        matches!(good.hello("a"), Reply::Welcome { .. }),
        "{}",
        d.log()
    );
    good.send(&Request::Acquire { device: GPU0 });
    wait_for(
        "a grant after the rogue frames",
        Duration::from_secs(5),
        || {
            matches!(
                good.recv_within(Duration::from_millis(200)),
                Some(Reply::Grant { .. })
            )
        },
    );
    let mut d = d;
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "gpushared exited: {}",
        d.log()
    );
}
