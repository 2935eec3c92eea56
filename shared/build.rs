// sqlx::migrate! embeds the migration files; rebuild when one is added or changed.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
