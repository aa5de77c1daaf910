//! The daemon's step slots: how many local tools execute at once across all its runs.
//!
//! The pool keeps many runs in flight (more than the slots), so while one run's step commits
//! its end (an fsync) another's tool runs, and commits that meet share one group (group commit).
//! A run's own `parallel` still bounds how many of its steps run at once; the slots bound the
//! sum. A free slot goes to the waiting run served least recently — round robin by run, not by
//! step — so a run with a thousand ready steps takes its turn like a serial one and none starves
//! behind it. Steps on a remote target (SSH, Slurm) hold no slot: they run elsewhere.
//!
//! A slot given back is handed to the next waiter with its tool already started: the releasing
//! thread, awake as its own tool ended, runs the waiter's launch, so the slot is not left idle
//! while that thread is scheduled (BENCHMARKS §18). A local tool's waiter sleeps on its tool's
//! output pipes ([`cairn_exec::Park`]) and is not woken by the hand-over: its tool's end wakes
//! it, once, to read what the tool wrote (a tool still running is found by its clock).

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use cairn_core::ids::RunId;
use cairn_exec::{Launch, Park};

/// The steps waiting for a slot, per slot, that keep the registry's commits waiting for company:
/// with fewer, a held group could leave the slots nothing to start. Under the load bench
/// (BENCHMARKS §18) one or two a slot did no better than three.
const BACKLOG_DEPTH: usize = 3;

/// How often a step waiting for a slot looks at its stop signal.
const STOP_POLL: Duration = Duration::from_millis(100);

/// Past this many remembered runs, those not waiting are forgotten (they are then served first,
/// once: a bounded memory over a daemon's lifetime is worth that small unfairness).
const SERVED_MAX: usize = 4096;

pub(crate) struct StepSlots {
    capacity: usize,
    state: Mutex<State>,
    /// Set while steps of several runs wait for a slot (for the registry's group commit).
    backlog: cairn_store::Backlog,
}

#[derive(Default)]
struct State {
    used: usize,
    /// In arrival order.
    waiting: Vec<Waiter>,
    /// The grant number each run was last given a slot at: read for every waiter at each
    /// hand-over, so hashed with foldhash rather than SipHash (run ids are ours, not an
    /// adversary's).
    served: HashMap<RunId, u64, foldhash::fast::RandomState>,
    grants: u64,
}

struct Waiter {
    run: RunId,
    grant: Arc<Grant>,
    /// Run by the thread that hands this waiter its slot, before it marks the grant given.
    launch: Launch,
}

/// A waiter's slot: marked given by the releasing thread once it has run the waiter's launch.
#[derive(Default)]
struct Grant {
    state: Mutex<Granted>,
    wake: Condvar,
}

#[derive(Default)]
struct Granted {
    given: bool,
    /// The waiter sleeps on `wake` (not on its tool's pipes): the hand-over must wake it.
    on_wake: bool,
}

impl Grant {
    /// Sleeps until the grant may have been given, or for at most `at_most`. On the tool's
    /// pipes while there is a park and nothing stirred them yet: woken by the tool the hand-over
    /// started, or by the clock. Once they have stirred (the tool ended before its launching
    /// thread marked the grant given, a moment later), on `wake`, which that thread then
    /// notifies: the pipes would only wake it again at once.
    fn sleep<'a>(
        &'a self,
        mut granted: MutexGuard<'a, Granted>,
        park: &mut Option<&Park<'_>>,
        at_most: Duration,
    ) -> MutexGuard<'a, Granted> {
        if let Some(p) = park {
            drop(granted);
            if p.wait(at_most) {
                *park = None;
            }
            return lock(&self.state);
        }
        granted.on_wake = true;
        granted = self.wake.wait_timeout(granted, at_most).unwrap_or_else(PoisonError::into_inner).0;
        granted.on_wake = false;
        granted
    }
}

/// A slot held: released when dropped.
pub(crate) struct Slot<'a> {
    slots: &'a StepSlots,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.slots.release();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl StepSlots {
    pub(crate) fn new(capacity: usize, backlog: cairn_store::Backlog) -> StepSlots {
        StepSlots { capacity: capacity.max(1), state: Mutex::new(State::default()), backlog }
    }

    /// Waits for a slot for a step of `run` and runs `launch` (the step's tool's spawn) once it
    /// has one, on this thread or on the thread that hands the slot over. `None` when `halted`
    /// says the step is to stop meanwhile (a cancel or a shutdown): holding nothing, and
    /// `launch` never run. With `park` (a local tool's pipes), the wait sleeps there: a slot
    /// handed over with the tool started is noticed when the tool ends, or within [`STOP_POLL`]
    /// while it runs (its time is counted from its start all the same).
    pub(crate) fn acquire(
        &self,
        run: &RunId,
        halted: &dyn Fn() -> bool,
        launch: Launch,
        mut park: Option<&Park<'_>>,
    ) -> Option<Slot<'_>> {
        let grant = {
            let mut state = lock(&self.state);
            if state.used < self.capacity && state.waiting.is_empty() {
                state.used += 1;
                state.serve(run);
                drop(state);
                launch();
                return Some(Slot { slots: self });
            }
            let grant = Arc::new(Grant::default());
            state.waiting.push(Waiter { run: run.clone(), grant: grant.clone(), launch });
            self.backlog.set(state.backlogged(self.capacity));
            grant
        };
        let mut granted = lock(&grant.state);
        loop {
            if granted.given {
                return Some(Slot { slots: self });
            }
            if halted() {
                drop(granted);
                let mut state = lock(&self.state);
                if let Some(i) = state.waiting.iter().position(|w| Arc::ptr_eq(&w.grant, &grant)) {
                    state.waiting.remove(i);
                    self.backlog.set(state.backlogged(self.capacity));
                    return None;
                }
                drop(state);
                // Handed over between the look and the lock: its tool is being started, and
                // runs; the caller stops it once it can name it, as a stop that came during a
                // spawn.
                granted = lock(&grant.state);
                while !granted.given {
                    granted = grant.sleep(granted, &mut park, STOP_POLL);
                }
                return Some(Slot { slots: self });
            }
            granted = grant.sleep(granted, &mut park, STOP_POLL);
        }
    }

    /// Hands the slot to the waiting run served least recently (the first to arrive among
    /// equals), starting its tool on this thread before waking it, or frees it.
    fn release(&self) {
        let mut state = lock(&self.state);
        let next = (0..state.waiting.len())
            .min_by_key(|&i| (state.served.get(&state.waiting[i].run).copied().unwrap_or(0), i));
        let Some(i) = next else {
            state.used = state.used.saturating_sub(1);
            return;
        };
        let waiter = state.waiting.remove(i);
        self.backlog.set(state.backlogged(self.capacity));
        state.serve(&waiter.run);
        drop(state);
        // A launch that panics started nothing; its waiter finds no process
        // (`cairn_exec::run_admitted` reports the tool not started).
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(waiter.launch));
        let mut granted = lock(&waiter.grant.state);
        granted.given = true;
        if granted.on_wake {
            waiter.grant.wake.notify_one();
        }
    }

    /// Slots in use and steps waiting for one.
    #[cfg(test)]
    fn load(&self) -> (usize, usize) {
        let state = lock(&self.state);
        (state.used, state.waiting.len())
    }
}

impl State {
    /// Enough steps of more than one run wait that every slot can be given again
    /// [`BACKLOG_DEPTH`] times before the commits held for company release more: while they do,
    /// those commits (one run's steps are committed one after the other by its scheduler) can
    /// share a group at no cost to the slots. Once fewer wait, the held group commits at once.
    fn backlogged(&self, capacity: usize) -> bool {
        self.waiting.len() >= capacity * BACKLOG_DEPTH
            && self.waiting.first().is_some_and(|first| self.waiting.iter().any(|w| w.run != first.run))
    }

    fn serve(&mut self, run: &RunId) {
        self.grants += 1;
        if self.served.len() >= SERVED_MAX && !self.served.contains_key(run) {
            let waiting: std::collections::HashSet<&RunId> = self.waiting.iter().map(|w| &w.run).collect();
            self.served.retain(|r, _| waiting.contains(r));
        }
        self.served.insert(run.clone(), self.grants);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    fn run(id: &str) -> RunId {
        RunId::parse(id).unwrap()
    }

    fn nothing() -> Launch {
        Box::new(|| {})
    }

    /// A slot handed over comes with its tool started by the thread that gave it back, before
    /// the waiter wakes: the slot never waits for the waiter to be scheduled. A waiter stopped
    /// meanwhile starts nothing.
    #[test]
    fn a_slot_handed_over_starts_the_waiters_tool_on_the_releasing_thread() {
        let slots = StepSlots::new(1, cairn_store::Backlog::default());
        let here = std::thread::current().id();
        let ran_on = Arc::new(Mutex::new(None));
        let first = slots.acquire(
            &run("a"),
            &|| false,
            {
                let ran_on = ran_on.clone();
                Box::new(move || *lock(&ran_on) = Some(std::thread::current().id()))
            },
            None,
        );
        assert_eq!(*lock(&ran_on), Some(here), "a free slot: launched by the caller at once");
        let stopped_launched = Arc::new(AtomicBool::new(false));
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let slots = &slots;
            let into = ran_on.clone();
            let waiter = s.spawn(move || {
                let launch: Launch = Box::new(move || *lock(&into) = Some(std::thread::current().id()));
                slots.acquire(&run("b"), &|| false, launch, None).is_some()
            });
            let stopped = {
                let launched = stopped_launched.clone();
                let stop = &stop;
                s.spawn(move || {
                    let launch: Launch = Box::new(move || launched.store(true, Ordering::SeqCst));
                    slots.acquire(&run("c"), &|| stop.load(Ordering::SeqCst), launch, None).is_none()
                })
            };
            while slots.load().1 < 2 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
            assert!(stopped.join().unwrap(), "the stopped step got no slot");
            *lock(&ran_on) = None;
            drop(first);
            assert_eq!(*lock(&ran_on), Some(here), "the waiter's tool was started by the thread giving the slot back");
            assert!(waiter.join().unwrap());
        });
        assert!(!stopped_launched.load(Ordering::SeqCst), "a stopped waiter's tool never started");
        assert_eq!(slots.load(), (0, 0));
    }

    /// A waiter that parks on its tool's pipes is handed its slot without being woken: the tool
    /// its launch started wakes it by ending (here, its end of the pipe closed, as a tool ending
    /// or failing to start closes it), and one still running is noticed by the clock. A tool
    /// that ends before its launching thread has marked the slot given does not make the waiter
    /// spin on its closed pipes: it then waits to be woken. A parked waiter stopped meanwhile
    /// gets nothing.
    #[test]
    fn a_parked_waiter_is_woken_by_its_tool_not_by_the_hand_over() {
        use std::os::fd::AsFd;
        #[derive(Clone, Copy, Debug)]
        enum Tool {
            Ends,
            EndsBeforeTheGrant,
            RunsOn,
        }
        let slots = StepSlots::new(1, cairn_store::Backlog::default());
        for tool in [Tool::Ends, Tool::EndsBeforeTheGrant, Tool::RunsOn] {
            let first = slots.acquire(&run("a"), &|| false, nothing(), None).unwrap();
            let (reader, writer) = std::io::pipe().unwrap();
            let (other, _open) = std::io::pipe().unwrap();
            let kept = Arc::new(Mutex::new(None));
            let looks = AtomicUsize::new(0);
            std::thread::scope(|s| {
                let slots = &slots;
                let keep = kept.clone();
                let looks = &looks;
                let waiter = s.spawn(move || {
                    let park = Park::new([reader.as_fd(), other.as_fd()]);
                    let launch: Launch = Box::new(move || match tool {
                        Tool::Ends => drop(writer),
                        Tool::EndsBeforeTheGrant => {
                            drop(writer);
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Tool::RunsOn => *lock(&keep) = Some(writer),
                    });
                    let halted = || {
                        looks.fetch_add(1, Ordering::SeqCst);
                        false
                    };
                    slots.acquire(&run("b"), &halted, launch, Some(&park)).is_some()
                });
                while slots.load().1 < 1 {
                    std::thread::yield_now();
                }
                drop(first);
                assert!(waiter.join().unwrap(), "the parked waiter has its slot ({tool:?})");
            });
            assert_eq!(slots.load(), (0, 0));
            assert_eq!(lock(&kept).is_some(), matches!(tool, Tool::RunsOn));
            // Each look is a wake: a few (the clock's, every STOP_POLL while the first slot is
            // held, however slow the machine), never a spin (tens of thousands).
            let looks = looks.load(Ordering::SeqCst);
            assert!(looks <= 20, "{tool:?}: the waiter looked {looks} times");
        }

        let held = slots.acquire(&run("a"), &|| false, nothing(), None).unwrap();
        let (reader, _writer) = std::io::pipe().unwrap();
        let park = Park::new([reader.as_fd(), reader.as_fd()]);
        let launched = Arc::new(AtomicBool::new(false));
        let stop = AtomicBool::new(true);
        let launch: Launch = {
            let launched = launched.clone();
            Box::new(move || launched.store(true, Ordering::SeqCst))
        };
        assert!(slots.acquire(&run("c"), &|| stop.load(Ordering::SeqCst), launch, Some(&park)).is_none());
        drop(held);
        assert!(!launched.load(Ordering::SeqCst));
        assert_eq!(slots.load(), (0, 0));
    }

    #[test]
    fn no_more_than_the_capacity_hold_a_slot_at_once() {
        let slots = StepSlots::new(2, cairn_store::Backlog::default());
        let (now, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for t in 0..8 {
                let (slots, now, most) = (&slots, &now, &most);
                s.spawn(move || {
                    for _ in 0..50 {
                        let _slot = slots.acquire(&run(&format!("r{t}")), &|| false, nothing(), None).unwrap();
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::yield_now();
                        now.fetch_sub(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 2);
        assert_eq!(slots.load(), (0, 0));
    }

    /// A run with many steps waiting does not take every free slot: a run that waits with one
    /// step is served next, as it was served less recently.
    #[test]
    fn a_free_slot_goes_to_the_run_served_least_recently() {
        let slots = StepSlots::new(1, cairn_store::Backlog::default());
        let held = slots.acquire(&run("big"), &|| false, nothing(), None).unwrap();
        let order = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            let (slots, order) = (&slots, &order);
            for _ in 0..3 {
                s.spawn(move || {
                    let _slot = slots.acquire(&run("big"), &|| false, nothing(), None).unwrap();
                    lock(order).push("big");
                });
            }
            while slots.load().1 < 3 {
                std::thread::yield_now();
            }
            s.spawn(move || {
                let _slot = slots.acquire(&run("small"), &|| false, nothing(), None).unwrap();
                lock(order).push("small");
            });
            while slots.load().1 < 4 {
                std::thread::yield_now();
            }
            drop(held);
        });
        assert_eq!(lock(&order)[0], "small", "{:?}", lock(&order));
        assert_eq!(slots.load(), (0, 0));
    }

    #[test]
    fn a_stop_ends_the_wait_holding_nothing() {
        let slots = StepSlots::new(1, cairn_store::Backlog::default());
        let held = slots.acquire(&run("a"), &|| false, nothing(), None).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let waiter =
                s.spawn(|| slots.acquire(&run("b"), &|| stop.load(Ordering::SeqCst), nothing(), None).is_none());
            while slots.load().1 < 1 {
                std::thread::yield_now();
            }
            stop.store(true, Ordering::SeqCst);
            assert!(waiter.join().unwrap(), "the stopped step got no slot");
        });
        assert_eq!(slots.load(), (1, 0));
        drop(held);
        assert_eq!(slots.load(), (0, 0));
    }

    /// The registry's commits wait for company only while enough steps of several runs queue
    /// that every slot can be refilled `BACKLOG_DEPTH` times (one run's steps are committed one
    /// after the other by its scheduler: a wait would only delay it), and the wait ends as soon
    /// as fewer do.
    #[test]
    fn the_backlog_is_set_while_enough_steps_of_several_runs_wait() {
        let backlog = cairn_store::Backlog::default();
        let slots = StepSlots::new(1, backlog.clone());
        let held = slots.acquire(&run("a"), &|| false, nothing(), None).unwrap();
        std::thread::scope(|s| {
            let slots = &slots;
            let queue = |id: &'static str, waiting: usize| {
                s.spawn(move || drop(slots.acquire(&run(id), &|| false, nothing(), None)));
                while slots.load().1 < waiting {
                    std::thread::yield_now();
                }
            };
            for n in 1..=BACKLOG_DEPTH {
                queue("a", n);
            }
            assert!(!backlog.is_set(), "one run's steps alone wait");
            queue("b", BACKLOG_DEPTH + 1);
            assert!(backlog.is_set(), "enough steps of two runs wait");
            drop(held);
        });
        assert_eq!(slots.load(), (0, 0));
        assert!(!backlog.is_set(), "nothing waits");

        // Two runs, but fewer steps waiting than the depth: every commit goes at once.
        let slots = StepSlots::new(1, backlog.clone());
        let held = slots.acquire(&run("a"), &|| false, nothing(), None).unwrap();
        std::thread::scope(|s| {
            let slots = &slots;
            s.spawn(move || drop(slots.acquire(&run("a"), &|| false, nothing(), None)));
            s.spawn(move || drop(slots.acquire(&run("b"), &|| false, nothing(), None)));
            while slots.load().1 < 2 {
                std::thread::yield_now();
            }
            assert!(!backlog.is_set(), "two steps wait, fewer than {BACKLOG_DEPTH}");
            drop(held);
        });
    }
}
