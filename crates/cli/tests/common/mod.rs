pub(crate) mod sum_cluster;
