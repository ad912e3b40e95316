// The throw-away PostgreSQL cluster of the tests (and of bench:boot): scripts/pg-cluster.ts.
export { pgBin, startPostgres, type PgCluster } from '../../scripts/pg-cluster';
