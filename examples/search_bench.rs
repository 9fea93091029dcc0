//! Runs linerate's MDR search and a plain binary NDR+PDR search on simulated devices and
//! prints one JSON line per run (used by `scripts/bench-search`).
//!
//! Usage: `search_bench [--binary] [--final S] [--phases N] [--seed-exact] [--verbose] [--trial-list]
//! [--plot PATH] MODEL...` (`--plot` draws PATH.svg and PATH.png of the last model's search;
//! `--trial-list` adds every trial's rate, duration, offered and lost counts to its JSON line).

use linerate::search::{drive, BinarySearch, MdrSearch, SearchConfig, Searcher, SimDut, SimModel};

fn main() {
    let mut binary = false;
    let mut verbose = false;
    let mut trial_list = false;
    let mut plot_path: Option<String> = None;
    let mut cfg = SearchConfig::csit();
    let mut models = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--binary" => binary = true,
            "--verbose" => verbose = true,
            "--trial-list" => trial_list = true,
            "--plot" => plot_path = args.next(),
            "--seed-exact" => cfg.seed_exact = true,
            "--final" => {
                cfg.final_duration = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--final needs seconds")
            }
            "--phases" => {
                cfg.phases = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--phases needs a count")
            }
            m => models.push((
                m.to_string(),
                m.parse::<SimModel>().unwrap_or_else(|e| {
                    eprintln!("{e}");
                    std::process::exit(2)
                }),
            )),
        }
    }
    for (model_text, model) in models {
        let mut searcher: Box<dyn Searcher> = if binary {
            Box::new(BinarySearch::new(cfg.clone()).expect("config"))
        } else {
            Box::new(MdrSearch::new(cfg.clone()).expect("config"))
        };
        let report = drive(searcher.as_mut(), &mut SimDut::new(model), &mut |_, _| {})
            .expect("the simulated device never fails");
        if let Some(path) = &plot_path {
            for ext in ["svg", "png"] {
                let p = std::path::Path::new(path).with_extension(ext);
                linerate::search::plot::plot(&report, &p).expect("plot");
            }
        }
        if verbose {
            for t in &report.trials {
                eprintln!(
                    "{:>16} {:>14.0} {:>8.3} {:.6}",
                    t.phase.to_string(),
                    t.rate_pps,
                    t.duration_s,
                    t.loss_ratio
                );
            }
        }
        let goals: Vec<_> = report
            .outcome
            .goals
            .iter()
            .map(|g| {
                let truth = model.true_rate(g.goal.loss_ratio, cfg.final_duration);
                serde_json::json!({
                    "loss_ratio": g.goal.loss_ratio,
                    "lower_pps": g.lower_pps,
                    "upper_pps": g.upper_pps,
                    "truth_pps": truth,
                })
            })
            .collect();
        let mut line = serde_json::json!({
            "algorithm": report.algorithm,
            "model": model_text,
            "trials": report.outcome.trial_count,
            "trial_duration_sum_s": report.outcome.trial_duration_sum_s,
            "goals": goals,
        });
        if trial_list {
            // (rate, duration, offered, lost) per trial, as search-mlrsearch.py prints them.
            line["trial_list"] = report
                .trials
                .iter()
                .map(|t| {
                    serde_json::json!([
                        t.rate_pps,
                        t.duration_s,
                        t.offered,
                        t.offered - t.received.min(t.offered)
                    ])
                })
                .collect();
        }
        println!("{line}");
    }
}
