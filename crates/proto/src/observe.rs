//! Hooks for a host to time the endpoint's own work, per stage, without the endpoint reading a
//! clock (it stays sans-IO: the observer, which lives in the driver, reads it).

/// A stage of the endpoint's work on one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Authenticating and decrypting a sealed packet.
    Decrypt,
    /// Parsing a packet and its frames: acks, messages, fragments, reassembly.
    Decode,
    /// Building a packet: acks, frames, resends and copies.
    Encode,
    /// Sealing a packet.
    Encrypt,
}

/// Watches the endpoint's stages: `enter` and `exit` bracket each stage of each packet, in
/// pairs, never nested. Calls are per packet, so an observer must be cheap; one that times
/// only some runs says how many to skip after each it watched ([`StageObserver::skip`]), and
/// the endpoint does not call it for those at all.
pub trait StageObserver: Send {
    /// `stage` starts.
    fn enter(&mut self, stage: Stage);
    /// `stage` ended.
    fn exit(&mut self, stage: Stage);
    /// Called after each `exit`: how many runs of any stage to leave unwatched before the next
    /// `enter` (none by default: every run is watched).
    fn skip(&mut self) -> u64 {
        0
    }
}

/// The endpoint's observer, if it has one, and how many runs it asked to skip.
#[derive(Default)]
pub(crate) struct Observer {
    observer: Option<Box<dyn StageObserver>>,
    /// Runs to pass over before the next watched one.
    skipping: u64,
    /// Whether the run under way is watched.
    watching: bool,
}

impl Observer {
    pub(crate) fn new(observer: Box<dyn StageObserver>) -> Self {
        Self { observer: Some(observer), skipping: 0, watching: false }
    }

    // `skipping` and `watching` are looked at before the observer: they are only ever set
    // with an observer, and most runs (all of them without one) end at that first test.
    #[inline]
    pub(crate) fn enter(&mut self, stage: Stage) {
        if self.skipping > 0 {
            // A plain decrement, not a call through the box: most watched endpoints' runs end
            // here.
            self.skipping -= 1;
            return;
        }
        let Some(observer) = &mut self.observer else { return };
        self.watching = true;
        observer.enter(stage);
    }

    #[inline]
    pub(crate) fn exit(&mut self, stage: Stage) {
        if !self.watching {
            return;
        }
        self.watching = false;
        if let Some(observer) = &mut self.observer {
            observer.exit(stage);
            self.skipping = observer.skip();
        }
    }

    /// Runs `f` as `stage`.
    #[inline]
    pub(crate) fn scope<T>(&mut self, stage: Stage, f: impl FnOnce() -> T) -> T {
        self.enter(stage);
        let out = f();
        self.exit(stage);
        out
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.observer.is_some() { "Observer(Some)" } else { "Observer(None)" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Records what it sees; skips two runs after each.
    struct Watcher(Arc<Mutex<Vec<(bool, Stage)>>>);

    impl StageObserver for Watcher {
        fn enter(&mut self, stage: Stage) {
            self.0.lock().unwrap().push((true, stage));
        }
        fn exit(&mut self, stage: Stage) {
            self.0.lock().unwrap().push((false, stage));
        }
        fn skip(&mut self) -> u64 {
            2
        }
    }

    #[test]
    fn an_observer_sees_whole_runs_and_none_of_those_it_skips() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut observer = Observer::new(Box::new(Watcher(seen.clone())));
        let stages = [Stage::Decrypt, Stage::Decode, Stage::Encode, Stage::Encrypt];
        for k in 0..7 {
            observer.scope(stages[k % 4], || ());
        }
        // Runs 0, 3 and 6 are watched, each from its enter to its exit.
        let expected = [(0, Stage::Decrypt), (3, Stage::Encrypt), (6, Stage::Encode)];
        let expected: Vec<(bool, Stage)> =
            expected.iter().flat_map(|(_, s)| [(true, *s), (false, *s)]).collect();
        assert_eq!(*seen.lock().unwrap(), expected);
    }
}
