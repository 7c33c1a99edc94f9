//! bucketd on MongoDB when the network fails ([`faults`]), and the fault proxy that makes it
//! fail, checked against the official driver ([`fault_proxy`]).

mod fault_proxy;
mod faults;
