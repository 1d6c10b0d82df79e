//! Every peer of the suite computes what it is timed on: each region
//! participant runs once, barriers hold, reductions add every share, row
//! jobs cover every row once, and the decode token equals the serial one
//! bit for bit. A peer that skipped work would look fast in the suite.
//! (With `--features peers`, candle, fork_union and chili are checked too;
//! candle's pool is process-wide, so it is checked at its own width.)

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use pool_benches::peers::{
    reduction_share, tiny_decode, Construct, Peer, PeerKind, REDUCTION_TOTAL,
};
use pool_matvec::decode::{DecodeModel, Serial, WeightFormat};
use testkit::watched;

fn check(peer: &mut dyn Peer, kind: PeerKind, model: &DecodeModel, serial: &[u32]) {
    let n = peer.threads();
    let name = kind.name();
    let ran: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
    // This pool's adaptive policy may leave workers out (none when other
    // processes keep the CPUs busy, at most one per CPU besides the
    // caller's when oversubscribed); every other peer always forks to all
    // of its threads.
    let own_pool = matches!(kind, PeerKind::Pool | PeerKind::PoolAlt);
    let width_ok = |m: usize| m == n || (own_pool && (1..=n).contains(&m));
    // The ping-pong floor bounces a line and runs no closure: it is the
    // floor of an empty fork-join, not a peer.
    if peer.supports(Construct::Region) && kind != PeerKind::PingPong {
        let width = AtomicUsize::new(0);
        peer.region(&|idx, m| {
            assert!(width_ok(m), "{name}: {m} participants of {n}");
            width.store(m, Ordering::Relaxed);
            ran[idx].fetch_add(1, Ordering::Relaxed);
        });
        let m = width.load(Ordering::Relaxed);
        for (idx, r) in ran.iter().enumerate() {
            let expected = usize::from(idx < m);
            assert_eq!(
                r.swap(0, Ordering::Relaxed),
                expected,
                "{name}: participant {idx}"
            );
        }
    }
    if peer.supports(Construct::Barrier) {
        // After each barrier every participant sees every stamp of the
        // phase before it.
        let stamps: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        let phase = AtomicUsize::new(0);
        let width = AtomicUsize::new(0);
        peer.barriers(8, &|idx, m| {
            assert!(width_ok(m), "{name}: {m} participants of {n}");
            width.store(m, Ordering::Relaxed);
            let mine = stamps[idx].fetch_add(1, Ordering::Relaxed);
            for (other, s) in stamps[..m].iter().enumerate() {
                let seen = s.load(Ordering::Relaxed);
                assert!(
                    seen >= mine,
                    "{name}: {idx} saw {other} behind ({seen} < {mine})"
                );
            }
            phase.fetch_add(1, Ordering::Relaxed);
        });
        let m = width.load(Ordering::Relaxed);
        assert_eq!(
            phase.load(Ordering::Relaxed),
            8 * m,
            "{name}: barrier shares"
        );
    }
    if peer.supports(Construct::Reduction) {
        let sum = peer.reduce(&|idx, m| {
            assert!(width_ok(m), "{name}: {m} participants of {n}");
            reduction_share(idx, m)
        });
        assert_eq!(sum, REDUCTION_TOTAL, "{name}: reduction");
    }
    if peer.supports(Construct::Rows) {
        let rows: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
        peer.rows(rows.len(), &|start, end| {
            assert!(start < end && end <= 1000, "{name}: range {start}..{end}");
            for r in &rows[start..end] {
                r.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert!(
            rows.iter().all(|r| r.load(Ordering::Relaxed) == 1),
            "{name}: every row once"
        );
    }
    if peer.supports(Construct::Decode) {
        let got: Vec<u32> = peer.decode(model).iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, serial, "{name}: decode token");
    }
}

#[test]
#[cfg_attr(miri, ignore = "threads of C and C++ libraries")]
fn every_peer_does_the_work_it_is_timed_on() {
    watched("peers", |stage| {
        let model = DecodeModel::random(tiny_decode(), WeightFormat::F32, 11);
        let serial: Vec<u32> = model
            .decode(&Serial, 1)
            .iter()
            .map(|v| v.to_bits())
            .collect();
        let mut checked = 0;
        for threads in [2, 3] {
            for kind in PeerKind::ALL {
                stage.set(format!("{} at {threads} threads", kind.name()));
                match kind.build(threads) {
                    Ok(mut peer) => {
                        check(&mut *peer, kind, &model, &serial);
                        checked += 1;
                    }
                    Err(reason) => eprintln!("{} at {threads}: {reason}", kind.name()),
                }
            }
        }
        assert!(checked >= 10, "only {checked} peers built");
    });
}

#[test]
#[cfg_attr(miri, ignore = "threads of C and C++ libraries")]
fn the_pools_barrier_in_a_region_is_its_run_phased() {
    // The pool's own barrier construct must be exercised by the suite: a
    // participant that skips a barrier makes it panic instead of hang.
    watched("pool_barrier", |_| {
        let mut peer = PeerKind::Pool.build(2).unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            peer.barriers(2, &|idx, _| {
                if idx == 0 {
                    panic!("participant 0 fails");
                }
            })
        }));
        assert!(result.is_err());
    });
}
