//! One scan's readings from NVML: the process lists with their memory, and per device the
//! per-process utilization samples of the window since the previous scan.

use super::nvml::{NvmlDevices, ProcessLists, Unread, UtilSample};
use super::verify::UtilWindow;
use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

/// How far the system clock may drift from the monotonic one over a utilization window before
/// the window is dropped (the clock was set): NVML stamps its samples with the system clock.
const CLOCK_STEP: Duration = Duration::from_secs(1);

/// One scan's NVML readings.
#[derive(Default)]
pub(crate) struct Readings {
    pub lists: ProcessLists,
    pub windows: Vec<UtilWindow>,
    /// Why per-process utilization could not be read, when it cannot be.
    pub util_unread: Option<Unread>,
}

fn epoch_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_micros().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0)
}

/// Reads the process lists and, for `util_from`'s devices, the utilization samples since then;
/// returns the readings and where the next windows start. Blocks on NVML.
pub(crate) fn read_nvml(
    nvml: &NvmlDevices,
    graphics: bool,
    util_from: Option<HashMap<u32, (Instant, u64)>>,
) -> (Readings, HashMap<u32, (Instant, u64)>) {
    let mut readings = Readings {
        lists: nvml.process_lists(graphics),
        ..Default::default()
    };
    let mut next = HashMap::new();
    let Some(util_from) = util_from else {
        return (readings, next);
    };
    for index in nvml.indices() {
        let Some(&(start, since_us)) = util_from.get(&index) else {
            // the first window of a device starts now
            next.insert(index, (Instant::now(), epoch_micros()));
            continue;
        };
        let result = nvml.process_utilization(index, since_us);
        let (end, end_us) = (Instant::now(), epoch_micros());
        next.insert(index, (end, end_us));
        match result {
            Ok(samples) => match window(index, (start, since_us), (end, end_us), samples) {
                Some(w) => readings.windows.push(w),
                None => tracing::debug!(
                    device = index,
                    "system clock set; utilization window dropped"
                ),
            },
            Err(Unread::Failed(e)) => {
                tracing::debug!(device = index, "cannot read per-process utilization: {e}")
            }
            Err(unsupported) => {
                readings.util_unread = Some(unsupported);
                break;
            }
        }
    }
    (readings, next)
}

/// The window of device `index` from `from` to `to` (each on the monotonic clock and in
/// microseconds since the epoch) with the samples stamped inside it; `None` when the system
/// clock was set meanwhile (its time and the monotonic time differ by more than [`CLOCK_STEP`]).
fn window(
    index: u32,
    (start, since_us): (Instant, u64),
    (end, end_us): (Instant, u64),
    samples: Vec<UtilSample>,
) -> Option<UtilWindow> {
    let mono = end.saturating_duration_since(start);
    let wall = Duration::from_micros(end_us.saturating_sub(since_us));
    if end_us < since_us || mono.abs_diff(wall) > CLOCK_STEP {
        return None;
    }
    let latest = end_us.saturating_add(CLOCK_STEP.as_micros() as u64);
    Some(UtilWindow {
        device: index,
        start,
        end,
        samples: samples
            .into_iter()
            .filter(|s| s.timestamp_us > since_us && s.timestamp_us <= latest)
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, timestamp_us: u64) -> UtilSample {
        UtilSample {
            pid,
            sm_util: 50,
            timestamp_us,
        }
    }

    #[test]
    fn a_window_keeps_the_samples_stamped_inside_it() {
        let start = Instant::now();
        let end = start + Duration::from_secs(2);
        let since = 1_000_000_000;
        let w = window(
            0,
            (start, since),
            (end, since + 2_000_000),
            vec![
                sample(1, since), // the previous window's
                sample(2, since + 1),
                sample(3, since + 2_000_000),
                sample(4, since + 3_000_000), // within the clock's slack
                sample(5, since + 3_000_001), // from the future
            ],
        )
        .unwrap();
        let pids: Vec<u32> = w.samples.iter().map(|s| s.pid).collect();
        assert_eq!(pids, vec![2, 3, 4]);
        assert_eq!((w.start, w.end), (start, end));
    }

    #[test]
    fn a_window_across_a_clock_step_is_dropped() {
        let start = Instant::now();
        let end = start + Duration::from_secs(2);
        let since = 1_000_000_000;
        assert!(window(0, (start, since), (end, since - 1), vec![]).is_none());
        assert!(window(0, (start, since), (end, since + 5_000_000), vec![]).is_none());
        assert!(window(0, (start, since), (end, since + 2_500_000), vec![]).is_some());
    }
}
