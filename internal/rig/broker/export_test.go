package broker

// ReadSecure lets the external tests (which may import the test rigs,
// as the package itself cannot: testkafka imports it) reach readSecure.
var ReadSecure = readSecure
