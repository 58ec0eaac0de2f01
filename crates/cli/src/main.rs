//! `kshard`: the one binary. Today: `kshard offsets decode` (decode one
//! `__consumer_offsets` record to JSON). The lag monitor (`kshard serve`) and the
//! runtime's commands land on the same binary.

mod offsets_json;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Kafka consumer-lag monitor and runtime for stateful, highly-available consumers.
#[derive(Debug, Parser)]
#[command(name = "kshard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Work with `__consumer_offsets` records.
    Offsets {
        #[command(subcommand)]
        command: OffsetsCommand,
    },
}

#[derive(Debug, Subcommand)]
enum OffsetsCommand {
    /// Decode one record (key and value as hex) and print it as one JSON object.
    ///
    /// Exit status: 0 when decoded (an unknown record type included), 2 when the
    /// bytes are malformed.
    Decode {
        /// The record key, in hex.
        #[arg(long)]
        key: String,
        /// The record value, in hex; omit it for a tombstone (null value).
        #[arg(long)]
        value: Option<String>,
    },
}

/// Exit status for input that could not be decoded (the same as a usage error).
const EXIT_MALFORMED: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Offsets { command: OffsetsCommand::Decode { key, value } } => decode(&key, value.as_deref()),
    }
}

fn decode(key: &str, value: Option<&str>) -> ExitCode {
    match offsets_json::decode_hex(key, value) {
        Ok(json) => {
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{json}") {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("kshard: writing the output failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("kshard: {e:#}");
            ExitCode::from(EXIT_MALFORMED)
        }
    }
}
