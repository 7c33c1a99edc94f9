//! Nothing acknowledged is lost, and nothing is stored twice: shutdowns, kills, crash loops,
//! full disks and logs, schema upgrades, and MongoDB faults.

mod crash_loop;
mod dead_letters;
mod disk_full;
mod embedded_crash;
mod mongo;
mod points_crash;
mod restart;
mod retention_crash;
mod schema_upgrade;
mod tcp_full_log;
