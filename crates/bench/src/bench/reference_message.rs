//! The W4 reference complex message: a match report of the kind a game server sends to a
//! backend or a client on round end, with nested structs, enums (unit, tuple and struct
//! variants), options, strings, vectors and maps. Generated from a seed.

use rally_wire::reference::SplitMix64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
pub struct MatchReport {
    pub match_id: u64,
    pub map: String,
    pub mode: GameMode,
    pub started_at_ms: u64,
    pub players: Vec<PlayerReport>,
    pub teams: BTreeMap<String, TeamScore>,
    pub settings: Option<Settings>,
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
pub enum GameMode {
    FreeForAll,
    Teams { size: u8, friendly_fire: bool },
    Custom(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
pub struct PlayerReport {
    pub id: u32,
    pub name: String,
    pub team: Option<u8>,
    pub stats: Stats,
    pub loadout: Vec<Item>,
    pub last_position: [f32; 3],
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
pub struct Stats {
    pub kills: u16,
    pub deaths: u16,
    pub assists: u16,
    pub accuracy: f32,
    pub damage: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
pub enum Item {
    Weapon { name: String, ammo: u16, attachments: Vec<String> },
    Consumable(u8),
    Cosmetic(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
pub struct TeamScore {
    pub score: i32,
    pub rounds_won: u8,
    pub mvp: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, bitcode::Encode, bitcode::Decode)]
pub struct Settings {
    pub tick_rate_hz: u16,
    pub max_players: u8,
    pub rules: BTreeMap<String, String>,
}

const NAMES: [&str; 8] = ["ada", "brook", "cyra", "dmitri", "eun-ji", "farah", "gus", "hana"];
const WEAPONS: [&str; 4] = ["paddle", "rifle", "bow", "frisbee"];

/// The reference message for `seed`: ten players, two teams.
pub fn generate(seed: u64) -> MatchReport {
    let mut rng = SplitMix64::new(seed);
    let players = (0..10u32).map(|i| player(&mut rng, i)).collect();
    let teams = ["red", "blue"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let score = TeamScore {
                score: (rng.next_u64() % 100) as i32 - 20,
                rounds_won: (rng.next_u64() % 13) as u8,
                mvp: (i == 0).then_some(3),
            };
            (name.to_string(), score)
        })
        .collect();
    let rules = [("overtime", "sudden-death"), ("respawn", "wave"), ("gravity", "9.81")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    MatchReport {
        match_id: rng.next_u64(),
        map: "colocated-sandbox/table-tennis-hall".into(),
        mode: GameMode::Teams { size: 5, friendly_fire: false },
        started_at_ms: 1_795_000_000_000 + rng.next_u64() % 1_000_000,
        players,
        teams,
        settings: Some(Settings { tick_rate_hz: 128, max_players: 10, rules }),
        tags: vec!["ranked".into(), "eu-west".into(), "season-4".into()],
    }
}

fn player(rng: &mut SplitMix64, i: u32) -> PlayerReport {
    let name = format!("{}-{}", NAMES[i as usize % NAMES.len()], rng.next_u64() % 1000);
    let weapon = WEAPONS[(rng.next_u64() % 4) as usize];
    let loadout = vec![
        Item::Weapon {
            name: weapon.into(),
            ammo: (rng.next_u64() % 300) as u16,
            attachments: (0..rng.next_u64() % 3).map(|k| format!("mod-{k}")).collect(),
        },
        Item::Consumable((rng.next_u64() % 5) as u8),
        Item::Cosmetic(format!("skin-{}", rng.next_u64() % 50)),
    ];
    PlayerReport {
        id: 1000 + i,
        name,
        // One spectator without a team exercises the None case.
        team: (i != 7).then_some((i % 2) as u8),
        stats: Stats {
            kills: (rng.next_u64() % 30) as u16,
            deaths: (rng.next_u64() % 30) as u16,
            assists: (rng.next_u64() % 20) as u16,
            accuracy: rng.range(0.1, 0.9),
            damage: (rng.next_u64() % 5000) as u32,
        },
        loadout,
        last_position: [rng.range(-20.0, 20.0), rng.range(0.0, 3.0), rng.range(-20.0, 20.0)],
    }
}
