"""embodirl's config groups (shipped as the package ``embodirl.conf``); importing it registers the
resolvers the YAML files use (:mod:`embodirl.config.resolvers`)."""

import embodirl.config.resolvers  # noqa: F401
