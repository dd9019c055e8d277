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
/// pairs, never nested. Calls are per packet, so an observer must be cheap.
pub trait StageObserver: Send {
    /// `stage` starts.
    fn enter(&mut self, stage: Stage);
    /// `stage` ended.
    fn exit(&mut self, stage: Stage);
}

/// The endpoint's observer, if it has one.
#[derive(Default)]
pub(crate) struct Observer(pub(crate) Option<Box<dyn StageObserver>>);

impl Observer {
    pub(crate) fn enter(&mut self, stage: Stage) {
        if let Some(observer) = &mut self.0 {
            observer.enter(stage);
        }
    }

    pub(crate) fn exit(&mut self, stage: Stage) {
        if let Some(observer) = &mut self.0 {
            observer.exit(stage);
        }
    }

    /// Runs `f` as `stage`.
    pub(crate) fn scope<T>(&mut self, stage: Stage, f: impl FnOnce() -> T) -> T {
        self.enter(stage);
        let out = f();
        self.exit(stage);
        out
    }
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Observer(Some)" } else { "Observer(None)" })
    }
}
