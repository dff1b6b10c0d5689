//! `dsh workflow test [PATH...]`: runs each workflow that has a sibling
//! fixture against it and compares the result with the expected file.

use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Workflow files or directories to search (default: the current directory).
    pub paths: Vec<PathBuf>,
}

pub async fn main(_args: TestArgs) -> i32 {
    super::print_error(
        dsh_protocol::ErrorCode::Usage,
        "dsh workflow test is not available yet",
    );
    super::exit::NOT_STARTED
}
