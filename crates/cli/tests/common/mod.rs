pub(crate) mod primaries;
pub(crate) mod sum_cluster;
