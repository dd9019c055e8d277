//! Loss models: which packets the wire drops.

use rally_proto::Instant;
use rand_core::RngCore;
use std::time::Duration;

/// How a link loses packets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossModel {
    /// Every packet arrives.
    None,
    /// Each packet is lost with `probability`, independently.
    Bernoulli {
        /// Loss probability, 0 to 1.
        probability: f64,
    },
    /// Linux netem's `loss P C`: a packet is lost when a correlated random number is below
    /// `P`, each number being `C` parts the previous one and `1 - C` parts fresh. Averaging
    /// pulls the numbers toward the middle, so the effective loss is far below `P` (about
    /// 1.75% for 10% and 25%): this is what a netem user measured, and what the source's
    /// "turbulent" figures mean.
    NetemCorrelated {
        /// `P`, 0 to 1.
        probability: f64,
        /// `C`, 0 to 1.
        correlation: f64,
    },
    /// A two-state Markov chain: in the good state packets are lost with `loss_in_good`, in
    /// the bad state with `loss_in_bad`; after each packet the chain moves from good to bad with
    /// `good_to_bad` and back with `bad_to_good`.
    GilbertElliott {
        /// Probability of entering the bad state after a packet in the good state.
        good_to_bad: f64,
        /// Probability of leaving the bad state after a packet in it (1 / mean burst length).
        bad_to_good: f64,
        /// Loss probability in the good state.
        loss_in_good: f64,
        /// Loss probability in the bad state.
        loss_in_bad: f64,
    },
    /// Outages in time: the wire alternates between spans that carry everything and spans that
    /// lose everything, each of a random (exponential) length, so that a packet is lost when it
    /// crosses during an outage. A burst is a span of time, not a count of packets: a sender of
    /// small, frequent packets loses as much of its time as one of large, rare packets, where
    /// [`LossModel::GilbertElliott`] (a count of packets) would shorten its bursts in time.
    Outages {
        /// Fraction of the time the wire is out, 0 to 1 (below 1).
        mean_loss: f64,
        /// Mean length of an outage.
        mean_outage: Duration,
    },
}

impl LossModel {
    /// Gilbert-Elliott bursts that lose every packet in the bad state and none in the good one,
    /// averaging `mean_loss` with bursts of `mean_burst` packets on average.
    pub fn bursts(mean_loss: f64, mean_burst: f64) -> Self {
        let bad_to_good = 1.0 / mean_burst.max(1.0);
        // Stationary P(bad) = p / (p + r) = mean_loss.
        let mean_loss = mean_loss.clamp(0.0, 0.999);
        let good_to_bad = bad_to_good * mean_loss / (1.0 - mean_loss);
        LossModel::GilbertElliott { good_to_bad, bad_to_good, loss_in_good: 0.0, loss_in_bad: 1.0 }
    }

    /// The long-run fraction of packets lost, where it has a closed form. For netem's
    /// correlated model, which has none, `None`.
    pub fn expected_loss(&self) -> Option<f64> {
        match *self {
            LossModel::None => Some(0.0),
            LossModel::Bernoulli { probability } => Some(probability),
            LossModel::NetemCorrelated { correlation: 0.0, probability } => Some(probability),
            LossModel::NetemCorrelated { .. } => None,
            LossModel::GilbertElliott { good_to_bad, bad_to_good, loss_in_good, loss_in_bad } => {
                let bad = good_to_bad / (good_to_bad + bad_to_good);
                Some(bad * loss_in_bad + (1.0 - bad) * loss_in_good)
            }
            // Packets sample the wire at their own times, independently of its state.
            LossModel::Outages { mean_loss, .. } => Some(mean_loss),
        }
    }
}

/// The state a loss model carries from packet to packet.
#[derive(Debug, Clone, Default)]
pub(crate) struct LossState {
    /// netem: the previous correlated number.
    last: u32,
    /// Gilbert-Elliott: whether the chain is in the bad state; outages: whether the wire is out.
    bad: bool,
    /// Outages: when the current span ends (`None` before the first packet).
    span_end: Option<Instant>,
}

impl LossState {
    /// Whether the next packet, crossing the wire at `at`, is lost.
    pub(crate) fn lose(&mut self, model: &LossModel, at: Instant, rng: &mut impl RngCore) -> bool {
        match *model {
            LossModel::None => false,
            LossModel::Bernoulli { probability } => unit(rng) < probability,
            LossModel::NetemCorrelated { probability, correlation } => {
                // sch_netem.c: loss when `q->loss >= get_crandom(&q->loss_cor)`, both scaled
                // to u32, with `answer = (value * (2^32 - rho) + last * rho) >> 32`.
                let threshold = scale_u32(probability);
                let rho = u64::from(scale_u32(correlation));
                let value = u64::from(rng.next_u32());
                let answer = if rho == 0 {
                    value
                } else {
                    let rho = rho + 1;
                    (value * ((1u64 << 32) - rho) + u64::from(self.last) * rho) >> 32
                };
                self.last = answer as u32;
                u64::from(threshold) >= answer && threshold > 0
            }
            LossModel::GilbertElliott { good_to_bad, bad_to_good, loss_in_good, loss_in_bad } => {
                let lost = unit(rng) < if self.bad { loss_in_bad } else { loss_in_good };
                let flip = unit(rng) < if self.bad { bad_to_good } else { good_to_bad };
                self.bad ^= flip;
                lost
            }
            LossModel::Outages { mean_loss, mean_outage } => {
                self.outage_at(at, mean_loss, mean_outage, rng)
            }
        }
    }

    /// Whether the wire is out at `at`: walks the alternating spans up to it. The first span
    /// is an outage with the model's probability, as if the wire had run forever before; so
    /// is one after a long silence.
    fn outage_at(
        &mut self,
        at: Instant,
        mean_loss: f64,
        mean_outage: Duration,
        rng: &mut impl RngCore,
    ) -> bool {
        let mean_loss = mean_loss.clamp(0.0, 0.999);
        if mean_loss == 0.0 || mean_outage.is_zero() {
            return false;
        }
        // Good spans are long enough that outages take `mean_loss` of the time.
        let mean_good = mean_outage.mul_f64((1.0 - mean_loss) / mean_loss);
        let span =
            |bad: bool, rng: &mut _| exponential(if bad { mean_outage } else { mean_good }, rng);
        // After a long silence the state is as random as at the start (the spans are
        // memoryless), and walking every span up to `at` would cost time without end.
        let forgotten = (mean_outage + mean_good) * 64;
        let mut end = match self.span_end.filter(|end| at - *end <= forgotten) {
            Some(end) => end,
            None => {
                self.bad = unit(rng) < mean_loss;
                at + span(self.bad, rng)
            }
        };
        while end <= at {
            self.bad = !self.bad;
            end += span(self.bad, rng);
        }
        self.span_end = Some(end);
        self.bad
    }
}

/// A span of exponentially distributed length with `mean` (memoryless, so the wire's state
/// says nothing of how long it lasts), at least a nanosecond so that time always advances.
fn exponential(mean: Duration, rng: &mut impl RngCore) -> Duration {
    let draw = -(1.0 - unit(rng)).ln();
    mean.mul_f64(draw).max(Duration::from_nanos(1))
}

/// A uniform number in [0, 1) with 53 bits of precision.
pub(crate) fn unit(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A probability as netem stores it: a fraction of `u32::MAX`.
fn scale_u32(probability: f64) -> u32 {
    (probability.clamp(0.0, 1.0) * f64::from(u32::MAX)).round() as u32
}
