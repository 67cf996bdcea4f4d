use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match cpulab::cli::try_parse_from(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout with 0; usage errors are bad input: 2.
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cpulab::cli::run_invocation(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if cpulab::error::is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cpulab: {e:#}");
            ExitCode::from(cpulab::error::exit_code(&e))
        }
    }
}
