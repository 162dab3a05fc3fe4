"""A stand-in for Apache Polaris 1.4.1's policy API (see ``standin``)."""
