// Package rig is the root of Parsley's test rigs: the soaks, the real-Kafka
// launcher, and the helpers of the observer's, the secured clients' and
// the tracing tests.
//
// The rigs sit above everything they exercise (they import stage, bridge,
// clock and observer), so they live in one tree apart from the runtime's
// own internal packages (internal/state, wait, buildinfo, kclient,
// kafkasec, aliascodec, broker), which import nothing above them. No
// production package imports a rig; internal/depcheck holds both rules.
//
//   - netsoak: network faults through in-process proxies, embedded broker
//   - failover: broker kills on a three-node real Kafka cluster
//   - testkafka: the real-Kafka launcher (JVMs from Maven Central); it
//     and the embedded broker speak one vocabulary, broker.Launcher
//   - oracle: the verification kit's shared judge (exactly once, in
//     order per lane), used by netsoak's and failover's oracles and by
//     adapters/adaptertest
//   - obstest, testcert, jaegertest: helpers of the observer's, the
//     secured clients' and the tracing tests
package rig
