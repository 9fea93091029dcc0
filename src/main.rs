//! The `linerate` command.

fn main() -> std::process::ExitCode {
    linerate::cli::main()
}
