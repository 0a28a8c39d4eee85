"""The reference PD cluster model: specs, cost and transfer physics, engines, routers and the sim target."""
