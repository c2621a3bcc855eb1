//! Unit tests of the daemon's state.

use super::*;

const GPU0: DeviceId = DeviceId([0; 16]);
const GPU1: DeviceId = DeviceId([1; 16]);

fn state(text: &str) -> (State, broadcast::Receiver<Event>) {
    let (tx, rx) = broadcast::channel(64);
    (
        State::new(
            Config::parse(text).unwrap(),
            "/etc/gpushare/gpushare.toml".into(),
            tx,
        ),
        rx,
    )
}

fn user(uid: u32, name: &str) -> Identity {
    Identity {
        uid,
        user: name.into(),
        groups: vec![name.into()],
        gids: vec![uid],
        place: None,
    }
}

const CFG: &str = "[defaults]\nmemory = \"1GiB\"\n[clients.train]\nrequest = 0.5\nmemory = 1000\nusers = [\"alice\"]\n";

#[test]
fn attach_checks_access_and_memory_is_freed_on_detach() {
    let (mut s, _rx) = state(CFG);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let alice = user(1000, "alice");
    let bob = user(1001, "bob");
    let err = s.attach(&bob, 7, "train", &[], tx.clone()).unwrap_err();
    assert_eq!(err.0, ErrorCode::NotAllowed);
    assert!(err.1.contains("bob"), "{}", err.1);
    let (sid, welcome) = s.attach(&alice, 8, "train", &[], tx.clone()).unwrap();
    assert!(matches!(
        welcome,
        Reply::Welcome {
            memory_cap: 1000,
            ..
        }
    ));
    assert_eq!(s.reserve(sid, GPU0, 600), Reply::Reserved { used: 600 });
    assert_eq!(
        s.reserve(sid, GPU0, 401),
        Reply::OverCap {
            used: 600,
            cap: 1000
        }
    );
    assert_eq!(s.reserve(sid, GPU0, 400), Reply::Reserved { used: 1000 });
    s.unreserve(sid, GPU0, 100);
    assert_eq!(s.reserve(sid, GPU0, 0), Reply::Reserved { used: 900 });
    s.acquire(sid, GPU0);
    assert_eq!(
        rx.try_recv().unwrap(),
        Reply::Grant {
            lease_ns: 20_000_000,
            flags: 0
        }
    );
    s.detach(sid);
    let r = s.report("train").unwrap();
    assert_eq!(r.memory_used, 0);
    assert!(!r.holding);
    assert!(r.pids.is_empty());
}

#[test]
fn unnamed_processes_get_their_users_default_client() {
    let (mut s, _rx) = state(CFG);
    let (tx, _r) = mpsc::unbounded_channel();
    let (a, w) = s
        .attach(&user(1001, "bob"), 9, "", &[], tx.clone())
        .unwrap();
    assert!(
        matches!(&w, Reply::Welcome { client, memory_cap, .. } if client == "user.bob" && *memory_cap == 1 << 30)
    );
    // another user cannot attach as bob's default client
    assert!(s
        .attach(&user(1002, "carol"), 10, "user.bob", &[], tx.clone())
        .is_err());
    s.detach(a);
    assert!(
        s.report("user.bob").is_none(),
        "default client goes with its last process"
    );
}

#[test]
fn a_re_attaching_process_keeps_its_memory_even_over_the_cap() {
    let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\nmemory = \"1GiB\"\n");
    let (tx, _r) = mpsc::unbounded_channel();
    let (a, _) = s
        .attach(&user(1, "u"), 1, "a", &[(GPU0, 3 << 29)], tx.clone())
        .unwrap();
    assert_eq!(s.report("a").unwrap().memory_used, 3 << 29);
    // Over the cap: nothing more fits, and what it frees comes off its count.
    assert!(matches!(s.reserve(a, GPU0, 1), Reply::OverCap { .. }));
    s.unreserve(a, GPU0, 1 << 29);
    assert_eq!(s.report("a").unwrap().memory_used, 1 << 30);
    assert!(matches!(s.reserve(a, GPU0, 1), Reply::OverCap { .. }));
    s.unreserve(a, GPU0, 1);
    assert!(matches!(s.reserve(a, GPU0, 1), Reply::Reserved { .. }));
    // Its exit gives all of it back.
    s.detach(a);
    assert_eq!(s.report("a").unwrap().memory_used, 0);
}

#[test]
fn each_gpu_has_its_own_token_and_memory_cap() {
    let (mut s, _rx) =
        state("[clients.a]\nusers=[\"*\"]\nmemory = 1000\n[clients.b]\nusers=[\"*\"]\n");
    let (ta, mut ra) = mpsc::unbounded_channel();
    let (tb, mut rb) = mpsc::unbounded_channel();
    let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
    let (b, _) = s.attach(&user(1, "u"), 2, "b", &[], tb).unwrap();
    s.acquire(a, GPU0);
    s.acquire(b, GPU1);
    assert!(matches!(ra.try_recv(), Ok(Reply::Grant { .. })));
    assert!(
        matches!(rb.try_recv(), Ok(Reply::Grant { .. })),
        "b holds GPU 1 while a holds GPU 0"
    );
    // the cap applies on each GPU
    assert_eq!(s.reserve(a, GPU0, 1000), Reply::Reserved { used: 1000 });
    assert_eq!(s.reserve(a, GPU1, 1000), Reply::Reserved { used: 1000 });
    assert_eq!(
        s.reserve(a, GPU1, 1),
        Reply::OverCap {
            used: 1000,
            cap: 1000
        }
    );
    s.unreserve(a, GPU1, 400);
    assert_eq!(s.reserve(a, GPU1, 0), Reply::Reserved { used: 600 });
    assert_eq!(s.reserve(a, GPU0, 0), Reply::Reserved { used: 1000 });
    let r = s.report("a").unwrap();
    assert_eq!(r.memory_used, 1600, "the total over the GPUs");
    let devices: Vec<(String, u64, bool)> = r
        .devices
        .iter()
        .map(|d| (d.device.clone(), d.memory_used, d.holding))
        .collect();
    assert_eq!(
        devices,
        vec![
            (GPU0.to_string(), 1000, true),
            (GPU1.to_string(), 600, false)
        ]
    );
    let p = s.attached_processes();
    assert_eq!(p.iter().find(|p| p.pid == 1).unwrap().reserved, 1600);
    assert_eq!(s.usage_snapshot().clients[0].memory_used, 1600);
    // its exit frees its memory and its lease on every GPU
    s.detach(a);
    let r = s.report("a").unwrap();
    assert_eq!((r.memory_used, r.holding), (0, false));
    assert_eq!(r.devices.len(), 1, "GPU 0, where it held a lease");
}

#[test]
fn a_re_attaching_process_keeps_its_memory_on_each_gpu() {
    let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\nmemory = 1000\n");
    let (tx, _r) = mpsc::unbounded_channel();
    let held = [(GPU0, 600), (GPU1, 1200)];
    let (a, _) = s.attach(&user(1, "u"), 1, "a", &held, tx).unwrap();
    assert_eq!(s.report("a").unwrap().memory_used, 1800);
    // over the cap on GPU 1 only
    assert!(matches!(
        s.reserve(a, GPU1, 1),
        Reply::OverCap { used: 1200, .. }
    ));
    assert_eq!(s.reserve(a, GPU0, 400), Reply::Reserved { used: 1000 });
    s.detach(a);
    assert_eq!(s.report("a").unwrap().memory_used, 0);
}

#[test]
fn a_process_names_a_bounded_number_of_gpus() {
    let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\n");
    let (tx, _r) = mpsc::unbounded_channel();
    let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], tx).unwrap();
    let gpu = |i: usize| DeviceId([i as u8; 16]);
    for i in 0..MAX_DEVICES {
        s.use_device(a, gpu(i)).unwrap();
    }
    s.use_device(a, gpu(0)).unwrap();
    let e = s.use_device(a, gpu(MAX_DEVICES)).unwrap_err();
    assert!(e.contains("more than 64 GPUs"), "{e}");
}

#[test]
fn two_sessions_alternate_and_a_dead_holder_passes_the_token() {
    // one lease at a time (by default, processes of equal weights overlap)
    let (mut s, _rx) = state(
        "[daemon]\nconcurrent_leases = 1\n[clients.a]\nusers=[\"*\"]\n[clients.b]\nusers=[\"*\"]\n",
    );
    let (ta, mut ra) = mpsc::unbounded_channel();
    let (tb, mut rb) = mpsc::unbounded_channel();
    let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
    let (b, _) = s.attach(&user(1, "u"), 2, "b", &[], tb).unwrap();
    s.acquire(a, GPU0);
    s.acquire(b, GPU0);
    assert!(matches!(ra.try_recv(), Ok(Reply::Grant { .. })));
    assert!(rb.try_recv().is_err(), "b waits while a holds the token");
    s.detach(a); // a crashed
    assert!(matches!(rb.try_recv(), Ok(Reply::Grant { .. })));
}

/// Runs `turns` leases between sessions `a` and `b` that both wait for GPU 0, whoever holds the
/// token renewing it after a millisecond, as the hook does at a lease's end; the leases each got.
fn renewing_turns(
    s: &mut State,
    (a, ra): (SessionId, &mut mpsc::UnboundedReceiver<Reply>),
    (b, rb): (SessionId, &mut mpsc::UnboundedReceiver<Reply>),
    turns: usize,
) -> (usize, usize) {
    let mut grants = (0, 0);
    // Each lease runs a millisecond of a clock held still between turns: on the real clock,
    // leases microseconds long left the division to whichever lease the test's thread was
    // preempted in (a run of the whole lib suite on a two-core machine failed
    // `fair_share_weighs_clients_by_their_decayed_usage` once).
    s.hold_clock();
    for _ in 0..turns {
        s.advance_clock(1_000_000);
        if matches!(ra.try_recv(), Ok(Reply::Grant { .. })) {
            grants.0 += 1;
            s.renew(a, GPU0, 1);
        } else if matches!(rb.try_recv(), Ok(Reply::Grant { .. })) {
            grants.1 += 1;
            s.renew(b, GPU0, 1);
        } else {
            panic!("nobody holds the token");
        }
    }
    grants
}

#[test]
fn renewing_holder_is_weighed_against_the_waiting_ones() {
    let (mut s, _rx) = state("[clients.big]\nrequest = 0.9\nusers=[\"*\"]\n[clients.small]\nrequest = 0.1\nusers=[\"*\"]\n");
    let (ta, mut ra) = mpsc::unbounded_channel();
    let (tb, mut rb) = mpsc::unbounded_channel();
    let (a, _) = s.attach(&user(1, "u"), 1, "big", &[], ta).unwrap();
    let (b, _) = s.attach(&user(1, "u"), 2, "small", &[], tb).unwrap();
    s.acquire(a, GPU0);
    s.acquire(b, GPU0);
    let grants = renewing_turns(&mut s, (a, &mut ra), (b, &mut rb), 20);
    // a release followed by a separate acquire would alternate 10/10
    assert!(grants.0 >= 15, "big got {} of 20 leases", grants.0);
}

#[test]
fn fair_share_weighs_clients_by_their_decayed_usage() {
    let (mut s, _rx) = state(
        "[daemon]\nconcurrent_leases = 1\nfairshare_half_life = \"7d\"\n\
         [clients.a]\nrequest = 0.5\nusers=[\"*\"]\n[clients.b]\nrequest = 0.5\nusers=[\"*\"]\n",
    );
    s.set_fair_usage(Some([("a".to_string(), 300e9)].into_iter().collect()));
    assert_eq!(
        s.fair_factor("a"),
        0.25,
        "all the usage for half the weight"
    );
    assert_eq!(s.fair_factor("b"), 1.0);
    let (ta, mut ra) = mpsc::unbounded_channel();
    let (tb, mut rb) = mpsc::unbounded_channel();
    let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
    let (b, _) = s.attach(&user(1, "u"), 2, "b", &[], tb).unwrap();
    // a user's default client joins the weighing when it appears
    let (tc, _rc) = mpsc::unbounded_channel();
    let (c, _) = s.attach(&user(2, "carol"), 3, "", &[], tc).unwrap();
    assert_eq!(s.fair_factor("user.carol"), 1.0);
    assert!(s.fair_factor("a") < 0.25, "a's part of the weights shrank");
    s.detach(c);
    assert_eq!(s.fair_factor("a"), 0.25);
    s.acquire(a, GPU0);
    s.acquire(b, GPU0);
    let grants = renewing_turns(&mut s, (a, &mut ra), (b, &mut rb), 50);
    // weights 0.125 and 0.5: b gets about four leases for each of a's
    assert!(grants.1 >= 3 * grants.0, "a {} b {}", grants.0, grants.1);
    // off again: equal requests weigh the same
    s.set_fair_usage(None);
    assert_eq!(s.fair_factor("a"), 1.0);
}

#[test]
fn management_rules() {
    let (mut s, mut rx) = state(CFG);
    let spec = ClientSpec::plain;
    let e = s.register(spec("big", 0.6), false).unwrap_err();
    assert!(
        matches!(&e, StateError::InvalidArgument(m) if m.contains("add up to 1.100")),
        "{e:?}"
    );
    s.register(spec("small", 0.2), false).unwrap();
    assert!(matches!(rx.try_recv(), Ok(Event::Changed { .. })));
    assert!(s.register(spec("small", 0.1), false).is_err(), "duplicate");
    assert!(
        s.register(spec("user.x", 0.1), false).is_err(),
        "reserved prefix"
    );
    s.set_share("small", Some(0.3), Some(0.9), Some(Some(5 << 30)))
        .unwrap();
    let r = s.report("small").unwrap();
    assert_eq!((r.request, r.limit, r.memory), (0.3, 0.9, Some(5 << 30)));
    assert!(
        s.set_share("small", Some(0.6), None, None).is_err(),
        "sum over 1"
    );
    assert!(
        s.set_share("small", None, Some(0.1), None).is_err(),
        "limit under request"
    );
    assert!(matches!(
        s.set_share("nope", Some(0.1), None, None),
        Err(StateError::UnknownClient(_))
    ));
    assert!(s.unregister("train").is_err(), "config clients stay");
    s.unregister("small").unwrap();
    assert!(s.report("small").is_none());
}

#[test]
fn usage_snapshots_hand_over_each_process_once_it_is_gone() {
    let (mut s, _rx) = state(CFG);
    let (tx, _r) = mpsc::unbounded_channel();
    let (sid, _) = s.attach(&user(1000, "alice"), 8, "train", &[], tx).unwrap();
    s.reserve(sid, GPU0, 300);
    s.acquire(sid, GPU0);
    let snap = s.usage_snapshot();
    assert_eq!(snap.sessions.len(), 1);
    let live = &snap.sessions[0];
    assert_eq!(
        (live.user.as_str(), live.client.as_str()),
        ("alice", "train")
    );
    assert_eq!((live.grants, live.reserved), (1, 300));
    assert_eq!(snap.clients[0].memory_cap, Some(1000));
    s.release(sid, GPU0, 0);
    s.detach(sid);
    let snap = s.usage_snapshot();
    assert!(snap.sessions.is_empty());
    assert_eq!(snap.ended.len(), 1);
    assert_eq!(snap.ended[0].0.grants, 1);
    assert!(s.usage_snapshot().ended.is_empty(), "handed over once");
    assert!(s
        .apply_config(Config::parse("[clients.x]\nrequest = 3\n"))
        .is_err());
    let snap = s.usage_snapshot();
    assert_eq!((snap.reload_failures, snap.config_error), (1, true));
}

#[test]
fn broken_reload_keeps_the_running_config() {
    let (mut s, mut rx) = state(CFG);
    let e = s
        .apply_config(Config::parse("[clients.train]\nrequest = 2\n"))
        .unwrap_err();
    assert!(e.contains("request 2"), "{e}");
    assert_eq!(s.config_error.as_deref(), Some(e.as_str()));
    assert_eq!(s.report("train").unwrap().request, 0.5);
    assert!(matches!(
        rx.try_recv(),
        Ok(Event::ConfigReloaded { ok: false, .. })
    ));
    s.apply_config(Config::parse(
        "[clients.train]\nrequest = 0.25\n[clients.new]\n",
    ))
    .unwrap();
    assert_eq!(s.report("train").unwrap().request, 0.25);
    assert!(s.report("new").is_some());
    assert!(s.config_error.is_none());
}

#[test]
fn a_reload_keeps_run_time_changes_of_entries_the_file_did_not_change() {
    let text = "[clients.train]\nrequest = 0.25\n[clients.other]\nrequest = 0.1\n";
    let (mut s, _rx) = state(text);
    s.set_share("train", Some(0.5), None, None).unwrap();
    // the same file again (a reload, or the watcher after an edit elsewhere)
    s.apply_config(Config::parse(text)).unwrap();
    assert_eq!(s.report("train").unwrap().request, 0.5, "kept");
    // another entry changed: this one is kept, that one applied
    let text = "[clients.train]\nrequest = 0.25\n[clients.other]\nrequest = 0.2\n";
    s.apply_config(Config::parse(text)).unwrap();
    assert_eq!(s.report("train").unwrap().request, 0.5);
    assert_eq!(s.report("other").unwrap().request, 0.2);
    // its own entry changed in the file: the file wins
    let text = "[clients.train]\nrequest = 0.3\n[clients.other]\nrequest = 0.2\n";
    s.apply_config(Config::parse(text)).unwrap();
    assert_eq!(s.report("train").unwrap().request, 0.3);

    // the requests that would run must fit, those kept from run time included
    s.set_share("train", Some(0.6), None, None).unwrap();
    let text = "[clients.train]\nrequest = 0.3\n[clients.other]\nrequest = 0.5\n";
    let e = s.apply_config(Config::parse(text)).unwrap_err();
    assert!(e.contains("train=0.6") && e.contains("run time"), "{e}");
    assert_eq!(
        s.report("other").unwrap().request,
        0.2,
        "the old config stays"
    );
}

#[test]
fn a_reload_keeps_a_users_run_time_share_unless_the_defaults_changed() {
    let (mut s, _rx) = state("[defaults]\nrequest = 0.1\n");
    let (tx, _r) = mpsc::unbounded_channel();
    let (_a, _) = s.attach(&user(7, "bob"), 1, "", &[], tx).unwrap();
    s.set_share("user.bob", Some(0.3), None, None).unwrap();
    s.apply_config(Config::parse("[defaults]\nrequest = 0.1\n[clients.x]\n"))
        .unwrap();
    assert_eq!(s.report("user.bob").unwrap().request, 0.3, "kept");
    s.apply_config(Config::parse("[defaults]\nrequest = 0.2\n"))
        .unwrap();
    assert_eq!(s.report("user.bob").unwrap().request, 0.2, "new defaults");
}

#[test]
fn usage_read_while_fair_share_is_off_weighs_nothing() {
    let (mut s, _rx) = state("[clients.a]\nrequest = 0.5\n[clients.b]\nrequest = 0.5\n");
    s.set_fair_usage(Some([("a".to_string(), 300e9)].into_iter().collect()));
    assert_eq!(s.fair_factor("a"), 1.0);
}

/// How leases run on a GPU, in the words of the status document, and a client's demand there:
/// the scheduler's estimate with overlap by demand (the default), none under MPS.
#[test]
fn lease_modes_and_demands_are_reported_in_the_documents_words() {
    let gpu0 = GPU0.to_string();
    let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\n");
    assert_eq!(s.leases(&gpu0), "together", "before any request");
    assert_eq!(s.leases("not a UUID"), "together");
    let (ta, _ra) = mpsc::unbounded_channel();
    let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
    s.acquire(a, GPU0);
    assert_eq!(s.leases(&gpu0), "together");
    let r = s.report("a").unwrap();
    assert_eq!(
        r.devices[0].demand,
        crate::scheduler::demand::INITIAL_DEMAND
    );
    s.release(a, GPU0, 0);
    assert_eq!(s.report("a").unwrap().devices[0].demand, 0.0, "idle");

    let (mut s, _rx) = state("[gpu]\nmps = true\n[clients.a]\nusers=[\"*\"]\n");
    assert_eq!(s.leases(&gpu0), "concurrent", "MPS not handed to clients");
    s.mps_pipe_dir = Some("/run/gpushare/mps".into());
    assert_eq!(s.leases(&gpu0), "mps");
    let (ta, _ra) = mpsc::unbounded_channel();
    let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
    s.acquire(a, GPU0);
    let r = s.report("a").unwrap();
    assert!(r.devices[0].holding);
    assert_eq!(r.devices[0].demand, 0.0, "no estimate under MPS");

    let (s, _rx) = state("[daemon]\nconcurrent_leases = 1\n");
    assert_eq!(s.leases(&gpu0), "one-at-a-time");
    let (s, _rx) = state("[daemon]\nconcurrent_leases = 3\n");
    assert_eq!(s.leases(&gpu0), "concurrent");
}

#[test]
fn units_and_slices_bind_processes_to_a_client_whoever_runs_them() {
    let cfg = "[clients.pods]\nmemory = 1000\nunits = [\"libpod-*.scope\"]\n\
               [clients.lab]\nslices = [\"lab.slice\"]\n\
               [clients.deep]\nslices = [\"team-a.slice\"]\n\
               [clients.train]\nusers = [\"alice\"]\n";
    let (mut s, _rx) = state(cfg);
    let (tx, _keep) = mpsc::unbounded_channel();
    let at = |path: &str| {
        user(1001, "bob").with_place(Some(crate::cgroup_place::CgroupPlace::from_path(path)))
    };
    let client_of = |s: &State, id: SessionId| s.sessions[&id].client.clone();
    // no client named: the unit's client, before any slice's
    let pod = at("/lab.slice/team-a.slice/libpod-9.scope");
    let (id, _) = s.attach(&pod, 10, "", &[], tx.clone()).unwrap();
    assert_eq!(client_of(&s, id), "pods");
    // the deepest matching slice, whatever the names' order
    let (id, _) = s
        .attach(
            &at("/lab.slice/team-a.slice/run-1.scope"),
            11,
            "",
            &[],
            tx.clone(),
        )
        .unwrap();
    assert_eq!(client_of(&s, id), "deep");
    let (id, _) = s
        .attach(&at("/lab.slice/run-2.scope"), 12, "", &[], tx.clone())
        .unwrap();
    assert_eq!(client_of(&s, id), "lab");
    // elsewhere: the user's default client, and no access to the bound clients
    let elsewhere = at("/user.slice/user-1001.slice/session-1.scope");
    let (id, _) = s.attach(&elsewhere, 13, "", &[], tx.clone()).unwrap();
    assert_eq!(client_of(&s, id), "user.bob");
    let e = s
        .attach(&elsewhere, 14, "pods", &[], tx.clone())
        .unwrap_err();
    assert_eq!(e.0, ErrorCode::NotAllowed);
    // in the unit, a client it binds may be named; one it does not bind, not
    assert!(s.attach(&pod, 15, "lab", &[], tx.clone()).is_ok());
    let e = s.attach(&pod, 16, "train", &[], tx.clone()).unwrap_err();
    assert_eq!(e.0, ErrorCode::NotAllowed);
    // a process whose place is unknown is bound to nothing
    let (id, _) = s
        .attach(&user(1001, "bob"), 17, "", &[], tx.clone())
        .unwrap();
    assert_eq!(client_of(&s, id), "user.bob");
}
