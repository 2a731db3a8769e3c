//! The autoscaler in the seeded simulation: real agents report what their instances use (the
//! simulator's load model), the autoscaler scales the service out under load and back in after
//! it, and the count never goes back and forth.

use std::time::Duration;

use ccattler_controllers::lang::{self, SourceFile};
use ccattler_core::schema::{self, Cpu, Memory, ScaleIntent};
use ccattler_runtime::simulator::{Demand, Load};
use ccattler_testkit::sim::Simulation;

const WEB: &str = "service web {
    image example/web:1
    instances 2
    resources {
        cpu 200m
        memory 64Mi
    }
    readiness {
        tcp
        every 1s
    }
    scale {
        horizontal {
            min 2
            max 10
            target cpu = 50
            stabilization {
                scale_down 60s
            }
        }
    }
}
";

fn sec(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The count in force, and the autoscaler's reason.
fn effective(sim: &Simulation) -> (u32, String) {
    let snapshot = sim.snapshot().expect("a snapshot");
    let count = snapshot
        .cluster()
        .effective
        .get("web")
        .map_or(0, |e| e.instances);
    let key = schema::keys::scale_intent("web").expect("key");
    let reason = snapshot
        .view()
        .get(key.as_str())
        .and_then(|f| schema::decode::<ScaleIntent>(f).ok())
        .map(|i| i.reason)
        .unwrap_or_default();
    (count, reason)
}

/// Steps until `until`, a second at a time, and returns each count the service had, from the
/// one it has now, in order, without repeats.
fn counts(sim: &mut Simulation, until: Duration) -> Vec<u32> {
    let mut seen: Vec<u32> = vec![effective(sim).0];
    while sim.now() < until {
        sim.run_until(sim.now() + sec(1));
        assert!(sim.violation().is_none(), "{:?}", sim.violation());
        let (count, _) = effective(sim);
        if seen.last() != Some(&count) {
            seen.push(count);
        }
    }
    seen
}

#[test]
fn a_service_scales_out_under_load_and_back_in_after_it_without_flapping() {
    let load = Load::new();
    let desired = lang::check(&SourceFile::new("web.cca", WEB))
        .expect("a valid document")
        .to_facts();
    let mut sim = Simulation::builder(desired)
        .seed(7)
        .nodes(3, Cpu::from_millis(4_000), Memory::from_bytes(8 << 30))
        .load(&load)
        .build();
    sim.run_until(sec(1));
    assert_eq!(counts(&mut sim, sec(40)), [2], "idle: the count declared");

    // 1000m of work over instances that request 200m, at 50 % each: 10 instances.
    load.set(
        "web",
        Demand {
            cpu: Cpu::from_millis(1_000),
            memory: Memory::from_bytes(64 << 20),
        },
    );
    let out = counts(&mut sim, sec(140));
    assert_eq!(out.first(), Some(&2));
    assert_eq!(out.last(), Some(&10), "{out:?}; {}", effective(&sim).1);
    assert!(
        out.windows(2).all(|w| w[0] < w[1]),
        "only up under load: {out:?}"
    );
    assert!(out.len() <= 4, "a few steps, each at most double: {out:?}");
    let (_, reason) = effective(&sim);
    assert!(reason.contains("cpu 50% of 50% over 10 ready"), "{reason}");

    // The load goes: back to the minimum once the scale-down window has passed, not before.
    load.clear("web");
    let within_window = counts(&mut sim, sec(190));
    assert_eq!(within_window, [10], "held for the 60 s window");
    let back = counts(&mut sim, sec(260));
    assert_eq!(back.last(), Some(&2), "{back:?}; {}", effective(&sim).1);
    assert!(
        back.windows(2).all(|w| w[0] > w[1]),
        "only down after it: {back:?}"
    );
}
