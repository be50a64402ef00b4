"""The configuration's ground floor: typed schemas of every component, their checking, and building from them."""
