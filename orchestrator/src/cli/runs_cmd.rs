//! `dsh workflow runs | show | resume`: runs kept in their run directories.

use clap::Args;

#[derive(Args, Debug)]
pub struct RunsArgs {}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The run id, or the path of its run directory.
    pub run: String,
}

#[derive(Args, Debug)]
pub struct ResumeArgs {
    /// The run id, or the path of its run directory.
    pub run: String,
}

fn not_yet(what: &str) -> i32 {
    super::print_error(
        dsh_protocol::ErrorCode::Usage,
        &format!("dsh workflow {what} is not available yet"),
    );
    super::exit::NOT_STARTED
}

pub fn runs(_args: RunsArgs) -> i32 {
    not_yet("runs")
}

pub fn show(_args: ShowArgs) -> i32 {
    not_yet("show")
}

pub async fn resume(_args: ResumeArgs) -> i32 {
    not_yet("resume")
}
