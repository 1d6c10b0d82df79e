//! Width resolution order and bad values.

use pool_topo::{parse_cpu_list, resolve_cpu_threads_with, WidthSource};

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn an_explicit_value_wins_over_every_variable() {
    let vars = [("FERROX_CPU_THREADS", "6"), ("RAYON_NUM_THREADS", "5")];
    let w = resolve_cpu_threads_with(Some(3), env(&vars), || 9);
    assert_eq!((w.threads, w.source), (3, WidthSource::Explicit));
}

#[test]
fn ferrox_cpu_threads_wins_over_rayon_num_threads() {
    let vars = [("FERROX_CPU_THREADS", "6"), ("RAYON_NUM_THREADS", "5")];
    let w = resolve_cpu_threads_with(None, env(&vars), || 9);
    assert_eq!((w.threads, w.source), (6, WidthSource::FerroxEnv));
    let w = resolve_cpu_threads_with(None, env(&vars[1..]), || 9);
    assert_eq!((w.threads, w.source), (5, WidthSource::RayonEnv));
    let w = resolve_cpu_threads_with(None, env(&[]), || 9);
    assert_eq!((w.threads, w.source), (9, WidthSource::Topology));
}

#[test]
fn unparsable_or_zero_values_are_warned_about_by_name_and_skipped() {
    for bad in ["abc", "0", "-2", ""] {
        let vars = [("FERROX_CPU_THREADS", bad), ("RAYON_NUM_THREADS", "4")];
        let (w, warnings) =
            testkit::capture_warnings(|| resolve_cpu_threads_with(None, env(&vars), || 9));
        assert_eq!((w.threads, w.source), (4, WidthSource::RayonEnv), "{bad:?}");
        assert!(warnings.contains("FERROX_CPU_THREADS"), "{warnings}");
        assert!(warnings.contains(&format!("{bad:?}")), "{warnings}");
    }
    let (w, warnings) =
        testkit::capture_warnings(|| resolve_cpu_threads_with(Some(0), env(&[]), || 2));
    assert_eq!((w.threads, w.source), (2, WidthSource::Topology));
    assert!(warnings.contains("explicit width of 0"), "{warnings}");
}

#[test]
fn cpu_lists_parse_sorted_and_deduplicated() {
    assert_eq!(
        parse_cpu_list("0-3,8,10-11\n").unwrap(),
        vec![0, 1, 2, 3, 8, 10, 11]
    );
    assert_eq!(parse_cpu_list("").unwrap(), Vec::<usize>::new());
    assert_eq!(parse_cpu_list(" \n").unwrap(), Vec::<usize>::new());
    assert_eq!(parse_cpu_list("5,1-2, 2 ,0\n").unwrap(), vec![0, 1, 2, 5]);
}

#[test]
fn malformed_cpu_lists_are_errors_that_quote_the_input() {
    for bad in ["0-", "a", "1,,2", "3-1", "0-3,x", "1-99999999999"] {
        let err = parse_cpu_list(bad).unwrap_err();
        assert!(
            err.to_string().contains(&format!("{bad:?}")),
            "{bad}: {err}"
        );
    }
}
