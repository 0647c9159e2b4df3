// The store contract test suite (feature `contract-tests`): written once, run by every
// backend through `store_contract_tests!`.
