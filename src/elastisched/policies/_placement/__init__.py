"""policies/_placement."""
