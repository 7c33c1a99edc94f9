//! The requests' share of `--memory-budget`: what write bodies, streamed NDJSON pieces and raw
//! TCP connections hold while their bytes are read and parsed into readings.
//!
//! Full-policy, by protocol: an HTTP request that cannot get its share is refused at once with
//! 503 and Retry-After (a queued request would hold its body meanwhile); a TCP connection
//! stops reading until the share frees room, and is closed if none frees within its idle
//! timeout (it acknowledged nothing it holds, so nothing acknowledged is lost).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::http::ApiError;

/// What a holder is charged per byte it holds: the bytes themselves, and the readings they are
/// parsed into (an [`Item`](crate::model::Item) costs a few times its line, and the bytes and
/// their readings live together until the push).
const CHARGE_PER_BYTE: usize = 4;
/// Permits count KiB: a semaphore's permits are acquired in `u32`s.
const PERMIT_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("write requests in progress hold their share of --memory-budget")]
pub struct MemoryBudgetFull;

/// Nothing of the refused request was accepted; a streamed write says how much of it was
/// (`ApiError::with_accepted`).
impl From<MemoryBudgetFull> for ApiError {
    fn from(_: MemoryBudgetFull) -> Self {
        ApiError::MemoryBudget { accepted: 0 }
    }
}

/// The share, shared by every write path. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RequestMemory {
    permits: Arc<Semaphore>,
}

/// What one request or connection holds of the share; released on drop.
#[derive(Debug, Default)]
pub struct Charge {
    permit: Option<OwnedSemaphorePermit>,
}

impl Charge {
    fn kib(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }

    fn add(&mut self, permit: OwnedSemaphorePermit) {
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
    }

    /// Gives back everything held.
    pub fn release(&mut self) {
        self.permit = None;
    }

    /// Gives back what is held beyond what `bytes` are charged.
    pub fn release_beyond(&mut self, bytes: usize) {
        let keep = kib_for(bytes);
        if let Some(held) = &mut self.permit
            && held.num_permits() > keep
        {
            drop(held.split(held.num_permits() - keep));
        }
    }
}

fn kib_for(bytes: usize) -> usize {
    bytes.saturating_mul(CHARGE_PER_BYTE).div_ceil(PERMIT_BYTES)
}

impl RequestMemory {
    pub fn new(budget_bytes: usize) -> RequestMemory {
        let permits = (budget_bytes / PERMIT_BYTES).clamp(1, Semaphore::MAX_PERMITS);
        RequestMemory { permits: Arc::new(Semaphore::new(permits)) }
    }

    /// Charges `bytes` more to `charge`, or refuses at once.
    pub fn try_charge(&self, charge: &mut Charge, bytes: usize) -> Result<(), MemoryBudgetFull> {
        let kib = u32::try_from(kib_for(bytes)).map_err(|_| MemoryBudgetFull)?;
        if kib == 0 {
            return Ok(());
        }
        let permit =
            self.permits.clone().try_acquire_many_owned(kib).map_err(|_| MemoryBudgetFull)?;
        charge.add(permit);
        Ok(())
    }

    /// Waits until `charge` covers `bytes` in all, at most `within`.
    pub async fn charge_up_to(
        &self,
        charge: &mut Charge,
        bytes: usize,
        within: Duration,
    ) -> Result<(), MemoryBudgetFull> {
        let missing = kib_for(bytes).saturating_sub(charge.kib());
        if missing == 0 {
            return Ok(());
        }
        let kib = u32::try_from(missing).map_err(|_| MemoryBudgetFull)?;
        let acquire = self.permits.clone().acquire_many_owned(kib);
        match tokio::time::timeout(within, acquire).await {
            Ok(Ok(permit)) => {
                charge.add(permit);
                Ok(())
            }
            // Closed never happens (the semaphore is never closed); timed out: full.
            _ => Err(MemoryBudgetFull),
        }
    }

    /// KiB of the share free now.
    #[cfg(test)]
    pub(crate) fn free_kib(&self) -> usize {
        self.permits.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_refuses_past_the_share_and_frees_on_release() {
        let memory = RequestMemory::new(64 * 1024);
        let mut a = Charge::default();
        memory.try_charge(&mut a, 10 * 1024).unwrap();
        assert_eq!(memory.free_kib(), 24, "charged four times the bytes");
        let mut b = Charge::default();
        assert!(memory.try_charge(&mut b, 7 * 1024).is_err(), "28 KiB of 24");
        memory.try_charge(&mut b, 6 * 1024).unwrap();
        assert_eq!(memory.free_kib(), 0);
        a.release_beyond(4 * 1024);
        assert_eq!(memory.free_kib(), 24);
        a.release_beyond(8 * 1024);
        assert_eq!(memory.free_kib(), 24, "releasing beyond more than held keeps it");
        drop(b);
        a.release();
        assert_eq!(memory.free_kib(), 64);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_charge_gets_what_is_freed_or_gives_up() {
        let memory = RequestMemory::new(64 * 1024);
        let mut a = Charge::default();
        memory.try_charge(&mut a, 12 * 1024).unwrap();
        let mut b = Charge::default();
        memory.charge_up_to(&mut b, 2 * 1024, Duration::from_secs(1)).await.unwrap();
        memory.charge_up_to(&mut b, 2 * 1024, Duration::from_secs(1)).await.unwrap();
        assert_eq!(b.kib(), 8, "already covered: nothing more");
        let waited = memory.charge_up_to(&mut b, 6 * 1024, Duration::from_secs(1)).await;
        assert!(waited.is_err(), "16 KiB more, 8 free, none freed within the second");
        assert_eq!(b.kib(), 8, "a charge that gave up holds what it held");
        assert_eq!(memory.free_kib(), 8);

        let more = memory.clone();
        let waiting = tokio::spawn(async move {
            more.charge_up_to(&mut b, 6 * 1024, Duration::from_secs(60)).await.map(|()| b.kib())
        });
        tokio::task::yield_now().await;
        a.release_beyond(8 * 1024);
        assert_eq!(waiting.await.unwrap().unwrap(), 24);
        assert_eq!(memory.free_kib(), 32, "a keeps 32; b ended with its task");
    }
}
