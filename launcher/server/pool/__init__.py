"""The models a server serves: their names, the library, the plan of each load, and the pool that loads them."""
