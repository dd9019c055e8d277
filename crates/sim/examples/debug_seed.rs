//! Runs one scenario seed and prints both connections' statistics at the end, for debugging
//! a failure `rally sim` reported.

fn main() {
    let seed: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut scenario = rally_sim::scenario::Scenario::from_seed(seed);
    let args: Vec<String> = std::env::args().skip(2).collect();
    if args.iter().any(|a| a == "no-blackouts") {
        scenario.blackouts.clear();
    }
    if args.iter().any(|a| a == "no-loss") {
        scenario.faulty.loss = rally_netem::LossModel::None;
    }
    if args.iter().any(|a| a == "no-reorder") {
        scenario.faulty.reorder = false;
    }
    if args.iter().any(|a| a == "no-dup") {
        scenario.faulty.duplicate = 0.0;
    }
    if args.iter().any(|a| a == "small") {
        scenario.size_max = 400;
    }
    let outcome = rally_sim::scenario::run_scenario(scenario);
    println!("{:?}", outcome.failure);
    println!("delivered {} refused {}", outcome.delivered, outcome.refused);
    println!("sent/arrived per side and channel: {:?}", outcome.counts);
    println!("clients {:#?}", outcome.stats);
}
