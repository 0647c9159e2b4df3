//! A closed stdout (`knife threads list | head -1`) ends the command quietly.
//!
//! Rust ignores SIGPIPE, so `println!` to a closed pipe panics with "failed printing
//! to stdout: Broken pipe"; resetting the signal needs `unsafe`, which the workspace
//! forbids. Instead a panic hook recognises that one panic and exits with status 0,
//! as if the reader had taken everything it wanted. Every other panic goes to the
//! default hook.

/// Installs the hook; call once at startup, before anything prints.
pub fn exit_quietly_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if is_broken_stdout(info.payload_as_str()) {
            std::process::exit(0);
        }
        default(info);
    }));
}

/// True for the message `print!`/`println!` panic with when stdout is a closed pipe.
fn is_broken_stdout(message: Option<&str>) -> bool {
    message.is_some_and(|m| m.starts_with("failed printing to stdout") && m.contains("Broken pipe"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_broken_stdout_panic_is_recognised() {
        assert!(is_broken_stdout(Some(
            "failed printing to stdout: Broken pipe (os error 32)"
        )));
        assert!(!is_broken_stdout(Some(
            "failed printing to stdout: No space left on device (os error 28)"
        )));
        assert!(!is_broken_stdout(Some("index out of bounds")));
        assert!(!is_broken_stdout(None));
    }
}
