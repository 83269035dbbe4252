"""`ray.experimental.state`: Ray's old path of the state API (`ray.util.state`). Ray 2.60 still
serves its modules `api`, `common` and `exception`, each with a DeprecationWarning, as here;
the package itself holds nothing, as Ray's does."""
