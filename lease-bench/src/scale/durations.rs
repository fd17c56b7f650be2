//! The renewals' durations as lease-core measures them: its
//! `lease_renewal_duration_seconds` histogram, kept by a metrics recorder
//! of the scale run's own (every other metric dropped).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::histogram::Histogram;

/// Each renewal's duration, from the start of its attempt (when it was
/// due, and queued) to its answer, as `lease-core` records it in the
/// `lease_renewal_duration_seconds` histogram: a renewal is within its
/// interval when it answered before the next one was due.
pub(crate) struct RenewalDurations {
    measuring: std::sync::atomic::AtomicBool,
    histogram: Mutex<Histogram>,
}

impl RenewalDurations {
    pub(crate) fn get() -> &'static Arc<RenewalDurations> {
        static DURATIONS: std::sync::OnceLock<Arc<RenewalDurations>> = std::sync::OnceLock::new();
        DURATIONS.get_or_init(|| {
            Arc::new(RenewalDurations {
                measuring: std::sync::atomic::AtomicBool::new(false),
                histogram: Mutex::new(Histogram::new()),
            })
        })
    }

    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, Histogram> {
        self.histogram
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn measure(&self, on: bool) {
        if on {
            *self.lock() = Histogram::new();
        }
        self.measuring
            .store(on, std::sync::atomic::Ordering::SeqCst);
    }
}

impl metrics::HistogramFn for RenewalDurations {
    fn record(&self, value: f64) {
        if self.measuring.load(std::sync::atomic::Ordering::Relaxed) {
            self.lock().record(Duration::from_secs_f64(value.max(0.0)));
        }
    }
}

/// A metrics recorder that keeps the renewal durations and drops the rest.
pub(crate) struct Recorder;

impl metrics::Recorder for Recorder {
    fn describe_counter(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_gauge(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn describe_histogram(
        &self,
        _: metrics::KeyName,
        _: Option<metrics::Unit>,
        _: metrics::SharedString,
    ) {
    }
    fn register_counter(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        metrics::Counter::noop()
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(
        &self,
        key: &metrics::Key,
        _: &metrics::Metadata<'_>,
    ) -> metrics::Histogram {
        if key.name() == "lease_renewal_duration_seconds" {
            metrics::Histogram::from_arc(RenewalDurations::get().clone())
        } else {
            metrics::Histogram::noop()
        }
    }
}
