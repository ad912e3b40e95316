// Stops the PostgreSQL cluster test/global-setup.js started for KURRENT_TEST_STORE=postgres.
module.exports = async () => {
  globalThis.__kurrentPg?.stop();
};
