//! A `metrics` recorder that keeps every counter, gauge and histogram
//! sample, for tests that check what the library records.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Every counter, gauge and histogram recorded, by key. Install it for a
/// test with `metrics::with_local_recorder(&recorded, ..)` (or
/// `metrics::set_default_local_recorder`).
#[derive(Default, Clone)]
pub struct Recorded {
    counters: Arc<Mutex<HashMap<Key, Arc<AtomicU64>>>>,
    gauges: Arc<Mutex<HashMap<Key, Arc<AtomicU64>>>>,
    histograms: Arc<Mutex<HashMap<Key, Arc<Samples>>>>,
}

fn matches(key: &Key, name: &str, labels: &[(&str, &str)]) -> bool {
    key.name() == name
        && labels
            .iter()
            .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
}

impl Recorded {
    /// The sum of the counters named `name` with these labels (and any
    /// others).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let counters = self.counters.lock().unwrap();
        counters
            .iter()
            .filter(|(k, _)| matches(k, name, labels))
            .map(|(_, v)| v.load(Ordering::SeqCst))
            .sum()
    }

    /// The gauge named `name` with these labels (and any others).
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let gauges = self.gauges.lock().unwrap();
        gauges
            .iter()
            .find(|(k, _)| matches(k, name, labels))
            .map(|(_, v)| f64::from_bits(v.load(Ordering::SeqCst)))
    }

    /// The samples of the histograms named `name`.
    pub fn histogram(&self, name: &str) -> Vec<f64> {
        let histograms = self.histograms.lock().unwrap();
        histograms
            .iter()
            .filter(|(k, _)| k.name() == name)
            .flat_map(|(_, v)| v.0.lock().unwrap().clone())
            .collect()
    }

    /// The samples of the histograms named `name` with these labels (and
    /// any others).
    pub fn histogram_with(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        let histograms = self.histograms.lock().unwrap();
        histograms
            .iter()
            .filter(|(k, _)| matches(k, name, labels))
            .flat_map(|(_, v)| v.0.lock().unwrap().clone())
            .collect()
    }

    /// The label keys of every counter whose name starts with `prefix`,
    /// sorted, each once.
    pub fn counter_label_keys(&self, prefix: &str) -> Vec<String> {
        let counters = self.counters.lock().unwrap();
        let mut keys: Vec<String> = counters
            .keys()
            .filter(|k| k.name().starts_with(prefix))
            .flat_map(|k| k.labels().map(|l| l.key().to_owned()).collect::<Vec<_>>())
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

impl Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut counters = self.counters.lock().unwrap();
        Counter::from_arc(counters.entry(key.clone()).or_default().clone())
    }

    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let mut gauges = self.gauges.lock().unwrap();
        Gauge::from_arc(gauges.entry(key.clone()).or_default().clone())
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut histograms = self.histograms.lock().unwrap();
        Histogram::from_arc(histograms.entry(key.clone()).or_default().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_gauges_and_histograms_are_kept_by_name_and_labels() {
        let rec = Recorded::default();
        metrics::with_local_recorder(&rec, || {
            metrics::counter!("c", "kind" => "a").increment(2);
            metrics::counter!("c", "kind" => "b").increment(3);
            metrics::gauge!("g", "kind" => "a").set(1.5);
            metrics::histogram!("h").record(0.25);
        });
        assert_eq!(rec.counter("c", &[]), 5);
        assert_eq!(rec.counter("c", &[("kind", "a")]), 2);
        assert_eq!(rec.gauge("g", &[("kind", "a")]), Some(1.5));
        assert_eq!(rec.histogram("h"), [0.25]);
        assert_eq!(rec.counter_label_keys("c"), ["kind"]);
    }
}
